"""A kernel's arguments put into or out of the CPU caches before each timed call: TVM time_evaluator
preprocs for the timing contexts (foundation.domain.timing_context).

TVM's own preproc, `cache_flush_cpu_non_first_arg`, flushes every argument but the first. These
flush only the arguments that ``set_roles`` named (the weights), or flush all and read the
activations back, as the kernel before leaves them, or evict the L2 alone by streaming a buffer of
``set_eviction``'s size (what it held moves to the L3) and read the activations back. A preproc
receives only the kernel's arguments, so the roles are set first, in the same process, by the runner
worker (local) or through the RPC session (a farm RPC server registers these at start,
foundation.rpc.single_process). Time_evaluator runs a preproc before each repeat, outside the timed
region.
"""

from __future__ import annotations

SET_ROLES = "farm.timing.set_roles"
FLUSH_WEIGHTS = "farm.timing.flush_weights"
PRODUCER = "farm.timing.producer"
SET_EVICTION = "farm.timing.set_eviction"
L2_EVICTED = "farm.timing.l2_evicted"
TVM_FLUSH = "cache_flush_cpu_non_first_arg"
# set_roles(weights..., SEPARATOR, activations...)
SEPARATOR = -1
CPU_DEVICE_TYPE = 1  # DLPack's kDLCPU


class _Roles:
    weights: tuple[int, ...] = ()
    activations: tuple[int, ...] = ()


_roles = _Roles()
_registered = False
# The buffer streamed through the caches by `l2_evicted`, allocated once a size (set_eviction).
_eviction: list = []


def set_roles(*positions: int) -> None:
    """Which arguments the next timings flush (the weights) and read back (the activations)."""
    split = positions.index(SEPARATOR) if SEPARATOR in positions else len(positions)
    _roles.weights = tuple(int(p) for p in positions[:split])
    _roles.activations = tuple(int(p) for p in positions[split + 1:])


def set_eviction(size_bytes: int) -> None:
    """The bytes the next `l2_evicted` timings stream through the caches."""
    import numpy as np

    size = max(int(size_bytes), 0) // 8 * 8
    if not _eviction or _eviction[0].nbytes != size:
        # Written once, so its pages are real memory, not the shared zero page a read of fresh memory maps.
        _eviction[:] = [np.ones(size // 8, dtype=np.float64)]


def evict_l2() -> None:
    """Read the eviction buffer end to end: the lines it brings in push out what the L2 held."""
    if _eviction:
        float(_eviction[0].sum())


def flush_tensors(tensors) -> None:
    """Flush each of ``tensors`` from every cache level (clflush over its bytes, TVM's own)."""
    if tensors:
        import tvm_ffi

        # TVM's flush skips its first argument: the first tensor goes in twice.
        tvm_ffi.get_global_func(TVM_FLUSH)(tensors[0], *tensors)


def read_back(tensors) -> None:
    """Read every byte of ``tensors`` into the caches, as a kernel that just wrote them leaves them.

    Read through the data pointer, not DLPack: an RPC server session passes its preproc tensors
    that view the call's arguments, and exporting one of those to DLPack crashes the session."""
    import ctypes

    import numpy as np

    for tensor in tensors:
        if tensor.device.dlpack_device_type() != CPU_DEVICE_TYPE:
            continue
        nbytes = tensor.numel() * tensor.dtype.itemsize
        if nbytes >= 8:
            words = (ctypes.c_uint64 * (nbytes // 8)).from_address(tensor.data_ptr())
            np.frombuffer(words, dtype=np.uint64).sum()


def flush_weights(*args) -> None:
    flush_tensors([args[i] for i in _roles.weights if i < len(args)])


def producer(*args) -> None:
    flush_tensors(list(args))
    read_back([args[i] for i in _roles.activations if i < len(args)])


def l2_evicted(*args) -> None:
    evict_l2()
    read_back([args[i] for i in _roles.activations if i < len(args)])


def register_preprocs() -> None:
    """Make the preprocs TVM global functions in this process (once; forks inherit them)."""
    global _registered
    if _registered:
        return
    import tvm_ffi

    tvm_ffi.register_global_func(SET_ROLES, set_roles, override=True)
    tvm_ffi.register_global_func(FLUSH_WEIGHTS, flush_weights, override=True)
    tvm_ffi.register_global_func(PRODUCER, producer, override=True)
    tvm_ffi.register_global_func(SET_EVICTION, set_eviction, override=True)
    tvm_ffi.register_global_func(L2_EVICTED, l2_evicted, override=True)
    _registered = True
