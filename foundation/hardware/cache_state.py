"""A kernel's arguments put into or out of the CPU caches before each timed call: TVM time_evaluator
preprocs for the timing contexts (foundation.domain.timing_context).

TVM's own preproc, `cache_flush_cpu_non_first_arg`, flushes every argument but the first. These
flush only the arguments that ``set_roles`` named (the weights), or flush all and read the
activations back, as the kernel before leaves them. A preproc receives only the kernel's arguments,
so the roles are set first, in the same process, by the runner worker (local) or through the RPC
session (a farm RPC server registers these at start, foundation.rpc.single_process). Time_evaluator
runs a preproc before each repeat, outside the timed region.
"""

from __future__ import annotations

SET_ROLES = "farm.timing.set_roles"
FLUSH_WEIGHTS = "farm.timing.flush_weights"
PRODUCER = "farm.timing.producer"
TVM_FLUSH = "cache_flush_cpu_non_first_arg"
# set_roles(weights..., SEPARATOR, activations...)
SEPARATOR = -1


class _Roles:
    weights: tuple[int, ...] = ()
    activations: tuple[int, ...] = ()


_roles = _Roles()
_registered = False


def set_roles(*positions: int) -> None:
    """Which arguments the next timings flush (the weights) and read back (the activations)."""
    split = positions.index(SEPARATOR) if SEPARATOR in positions else len(positions)
    _roles.weights = tuple(int(p) for p in positions[:split])
    _roles.activations = tuple(int(p) for p in positions[split + 1:])


def flush_tensors(tensors) -> None:
    """Flush each of ``tensors`` from every cache level (clflush over its bytes, TVM's own)."""
    if tensors:
        import tvm_ffi

        # TVM's flush skips its first argument: the first tensor goes in twice.
        tvm_ffi.get_global_func(TVM_FLUSH)(tensors[0], *tensors)


def read_back(tensors) -> None:
    """Read every byte of ``tensors`` into the caches, as a kernel that just wrote them leaves them."""
    import numpy as np

    for tensor in tensors:
        try:
            np.from_dlpack(tensor).sum()
        except (TypeError, BufferError, RuntimeError):  # a handle without DLPack (an RPC server's): left as it is
            continue


def flush_weights(*args) -> None:
    flush_tensors([args[i] for i in _roles.weights if i < len(args)])


def producer(*args) -> None:
    flush_tensors(list(args))
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
    _registered = True
