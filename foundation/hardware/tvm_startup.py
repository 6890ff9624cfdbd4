"""Cheap TVM start-up: register only the tensor intrinsics a target needs.

`import tvm.s_tir.tensor_intrin` registers the intrinsics of every backend (CUDA alone is
~30 s, ~43 s in all on a 2-core box). MetaSchedule imports it from `TuneContext.__init__` and
from LocalBuilder's default build function, so a naive tuner pays that in the tuning process
and again in every builder worker, and LocalBuilder's 30 s timeout then kills every build.
We install a lean `tvm.s_tir.tensor_intrin` package first; later imports of it are no-ops.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import signal
import sys
import threading
import types

_PACKAGE = "tvm.s_tir.tensor_intrin"

# Which submodules of tvm.s_tir.tensor_intrin a target kind can use. CUDA's tensor-core
# intrinsics are only needed by the "cuda-tensorcore" schedule rules, which the farm does not
# enable by default; registering them costs ~30 s per process.
_INTRINSICS_BY_KIND = {
    ("llvm", "x86_64"): ("x86",),
    ("llvm", "amd64"): ("x86",),
    ("llvm", "aarch64"): ("arm_cpu",),
    ("llvm", "arm64"): ("arm_cpu",),
    ("cuda", None): (),
}


def intrinsic_modules(target_kind: str, machine: str | None = None) -> tuple[str, ...]:
    """The tensor-intrinsic submodules registered for ``target_kind`` on this machine."""
    machine = (machine or platform.machine()).lower()
    if (target_kind, machine) in _INTRINSICS_BY_KIND:
        return _INTRINSICS_BY_KIND[(target_kind, machine)]
    return _INTRINSICS_BY_KIND.get((target_kind, None), ())


def pin_tvm_threads() -> str:
    """Make TVM's runtime use every core this process may run on; returns the setting.

    TVM's thread pool defaults to half the logical CPUs on x86 (it assumes two hyper-threads
    per core), so on a 2-core box without SMT every measurement and every deployed run used
    one thread while the target said num-cores=2. Set before TVM's pool starts (it starts at
    the first parallel kernel); an explicit TVM_NUM_THREADS from the user wins.
    """
    from foundation.hardware.fingerprint import available_cores

    return os.environ.setdefault("TVM_NUM_THREADS", str(available_cores()))


def use_farm_llvm_rules() -> None:
    """Register every lowering rule of the farm for LLVM targets that its switch allows
    (foundation.hardware.llvm_rules): float32 exp and erf as polynomials."""
    from foundation.hardware.polynomial_erf import use_polynomial_erf
    from foundation.hardware.polynomial_exp import use_polynomial_exp

    use_polynomial_exp()
    use_polynomial_erf()


def install_lean_tensor_intrinsics(target_kind: str) -> tuple[str, ...]:
    """Make ``tvm.s_tir.tensor_intrin`` an importable package holding only what we need.

    Idempotent and thread-safe: a thread returns once the intrinsics of ``target_kind`` are
    registered, whichever thread registers them, and a process that registered one kind's (cuda's:
    none) registers another's (llvm's x86) when it meets it. If the full package was already
    imported, nothing changes. Returns the submodules registered by this call. For LLVM targets it
    also registers the farm's float32 exp and erf (foundation.hardware.llvm_rules): every process
    that builds for a CPU comes here first, the builder workers included, so candidates are measured
    as the library is built.
    """
    pin_tvm_threads()
    # One thread at a time: another thread's tuning found the lean package in sys.modules while
    # its first thread was still importing x86 ("TensorIntrin 'dot_16x4_vnni' is not registered").
    with _REGISTERING:
        if target_kind == "llvm":
            use_farm_llvm_rules()
        package = sys.modules.get(_PACKAGE)
        if package is None:
            package = _lean_package()
            if package is None:  # pragma: no cover - broken TVM
                return ()
        elif not getattr(package, _LEAN, False):
            return ()  # TVM's own package: every backend's intrinsics are registered
        wanted = [name for name in intrinsic_modules(target_kind) if f"{_PACKAGE}.{name}" not in sys.modules]
        for name in wanted:
            importlib.import_module(f"{_PACKAGE}.{name}")
        return tuple(wanted)


_REGISTERING = threading.RLock()
_LEAN = "_registered_by_tvm_farm"


def _unlock_in_child() -> None:
    """A process forked while another thread registered (a worker zygote) starts with the lock free."""
    global _REGISTERING
    _REGISTERING = threading.RLock()


os.register_at_fork(after_in_child=_unlock_in_child)


def _lean_package() -> types.ModuleType | None:
    """An empty ``tvm.s_tir.tensor_intrin`` in sys.modules, marked as the farm's; None without TVM's."""
    import tvm.s_tir  # noqa: F401  (the parent package must exist first)

    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.submodule_search_locations is None:  # pragma: no cover - broken TVM
        return None
    package = types.ModuleType(_PACKAGE, "Tensor intrinsics (lean: registered by tvm-farm)")
    package.__path__ = list(spec.submodule_search_locations)
    package.__package__ = _PACKAGE
    package.__spec__ = spec
    package.__file__ = spec.origin
    setattr(package, _LEAN, True)
    sys.modules[_PACKAGE] = package
    sys.modules["tvm.s_tir"].tensor_intrin = package
    return package


class LeanWorkerInit:
    """Picklable initializer for MetaSchedule's builder/runner worker processes.

    Workers ignore SIGINT: a Ctrl-C goes to the terminal's whole process group, and the
    process that started them is the one that stops the tuning (and then the workers).
    On Linux they die with the thread that started them (PR_SET_PDEATHSIG): a process
    killed while a worker was busy (a measurement waiting on a tracker that is gone, say)
    leaves no orphan running on.
    """

    def __init__(self, target_kind: str):
        self.target_kind = target_kind

    def __call__(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _die_with_parent()
        install_lean_tensor_intrinsics(self.target_kind)


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
