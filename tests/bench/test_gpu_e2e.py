"""bench/gpu_e2e.sh refuses, loudly and before starting anything, on a box without an NVIDIA GPU."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_e2e.sh"


def run(path: str, work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path, "WORK": str(work)}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this box has nvidia-smi")
def test_without_nvidia_smi_it_exits_3_saying_why(tmp_path):
    done = run(os.environ["PATH"], tmp_path / "work")
    assert done.returncode == 3
    assert done.stderr.strip().splitlines() == [
        "error: no NVIDIA GPU here: nvidia-smi is not on PATH "
        "(run bench/gpu_e2e.sh on a box with an NVIDIA GPU and its driver)"]
    assert done.stdout == "" and not (tmp_path / "work").exists()


def test_a_driver_that_lists_no_gpu_is_refused_too(tmp_path):
    # What nvidia-smi -L prints, and exits with, where the driver is installed but no device is visible.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    done = run(f"{bin_dir}:/usr/bin:/bin", tmp_path / "work")
    assert done.returncode == 3
    assert done.stderr.strip() == ("error: nvidia-smi lists no GPU: No devices were found "
                                   "(check the driver with nvidia-smi)")
    assert not (tmp_path / "work").exists()
