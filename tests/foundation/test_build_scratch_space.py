"""A library built with its temporary directory full: OutOfResources naming the directory, not LLVM
ending the process from inside ("LLVM ERROR: IO failure on output stream", exit 1)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from support.small_disk import fill, small_disk

BUILD = textwrap.dedent("""
    import sys, tempfile
    tempfile.tempdir = sys.argv[1]
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    install_lean_tensor_intrinsics("llvm")
    import tvm
    from foundation.compile import build_library
    from foundation.errors import OutOfResources
    from foundation.models.loading import load_model
    try:
        build_library(load_model("mlp-tiny", 1), tvm.target.Target({"kind": "llvm", "num-cores": 2}), None)
    except OutOfResources as err:
        print(f"refused: {err}")
        sys.exit(6)
""")


def test_a_build_whose_temporary_directory_is_full_is_refused_not_ended_inside_llvm(tmp_path):
    with small_disk(tmp_path / "tmp", 1024) as tmpdir:
        fill(tmpdir)
        proc = subprocess.run([sys.executable, "-c", BUILD, str(tmpdir)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 6, proc.stderr[-2000:]
    assert f"refused: the disk is full for {tmpdir}, the temporary directory" in proc.stdout, proc.stdout
    assert "LLVM ERROR" not in proc.stderr, proc.stderr[-2000:]
