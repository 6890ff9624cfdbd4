"""`farm agent --device cuda:N` on a box where CUDA sees no such GPU: one line, exit 2, before it calls anyone."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest


@pytest.fixture(scope="module")
def no_cuda_gpu():
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("this box has a CUDA GPU")


def test_agent_on_a_missing_gpu_refuses_in_one_line(no_cuda_gpu, farm_exe, tmp_path):
    # A coordinator address nothing listens on: the refusal must come before any call to it.
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    env.pop("FARM_DEVICE", None)
    env.pop("FARM_AGENT_DEVICE", None)
    done = subprocess.run([farm_exe, "agent", "--coordinator", address, "--device", "cuda:0"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        "error: no CUDA device 0 on this machine "
        "(tune for llvm here, or run the agent on a box with an NVIDIA GPU and driver)"]
    assert done.stdout == ""
