"""The lean tensor-intrinsic start-up: MetaSchedule works, the 43 s import never happens."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from foundation.hardware.tvm_startup import intrinsic_modules


def test_intrinsics_per_target_kind():
    assert intrinsic_modules("llvm", "x86_64") == ("x86",)
    assert intrinsic_modules("llvm", "aarch64") == ("arm_cpu",)
    assert intrinsic_modules("cuda", "x86_64") == ()


def test_tune_context_does_not_import_every_backend():
    """In a fresh process: a TuneContext (which imports tensor_intrin) loads only x86."""
    code = textwrap.dedent(
        """
        import sys
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
        print(install_lean_tensor_intrinsics("llvm"))
        import tvm
        from tvm import te
        from tvm.s_tir import meta_schedule as ms
        A = te.placeholder((32, 32), name="A")
        B = te.compute((32, 32), lambda i, j: A[i, j] * 2.0, name="B")
        mod = tvm.IRModule({"main": te.create_prim_func([A, B])})
        ms.TuneContext(mod=mod, target=tvm.target.Target({"kind": "llvm", "num-cores": 2}),
                       space_generator="post-order-apply", search_strategy="evolutionary")
        import tvm.s_tir.tensor_intrin  # what MetaSchedule does: must be a no-op now
        loaded = sorted(m for m in sys.modules if m.startswith("tvm.s_tir.tensor_intrin."))
        print(",".join(loaded))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    registered, loaded = proc.stdout.strip().splitlines()[-2:]
    assert registered == "('x86',)"
    assert loaded == "tvm.s_tir.tensor_intrin.x86"
    assert "cuda" not in loaded


def test_install_is_idempotent():
    code = (
        "from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics as i;"
        "print(i('llvm'), i('llvm'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "('x86',) ()"


def test_tvm_runtime_uses_every_available_core():
    """TVM would use half the logical CPUs on x86; the farm pins it to the cores it counts."""
    code = (
        "import os\n"
        "os.environ.pop('TVM_NUM_THREADS', None)\n"
        "from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics\n"
        "from foundation.hardware.fingerprint import available_cores\n"
        "install_lean_tensor_intrinsics('llvm')\n"
        "import tvm\n"
        "print(tvm.get_global_func('runtime.NumThreads')(), available_cores())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    threads, cores = proc.stdout.split()
    assert threads == cores


def _run(code: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_a_process_that_registered_cudas_intrinsics_registers_llvms_when_it_meets_llvm():
    """A coordinator or agent that met a cuda job first went on without x86's: an llvm job's
    tensorized trace then failed ("TensorIntrin 'dot_16x4_vnni' is not registered")."""
    proc = _run("""
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
        print(install_lean_tensor_intrinsics("cuda"), install_lean_tensor_intrinsics("llvm"))
        from tvm.s_tir import TensorIntrin
        print(TensorIntrin.get("dot_16x4_vnni", allow_missing=True) is not None)
    """)
    assert proc.stdout.split("\n")[:2] == ["() ('x86',)", "True"]


def test_threads_registering_at_once_each_return_with_the_intrinsics_registered():
    """farm.submit from two threads: the second found the package in sys.modules while the first
    still imported x86, returned at once and tuned without it."""
    proc = _run("""
        import threading
        import tvm.s_tir
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
        from tvm.s_tir import TensorIntrin

        start, seen = threading.Barrier(8), []

        def register():
            start.wait()
            install_lean_tensor_intrinsics("llvm")
            seen.append(TensorIntrin.get("dot_16x4_vnni", allow_missing=True) is not None)

        threads = [threading.Thread(target=register) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(seen.count(True), len(seen))
    """)
    assert proc.stdout.split() == ["8", "8"]
