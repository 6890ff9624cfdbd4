"""bench/gpu_e2e.sh and bench/gpu_run.sh refuse, loudly and before starting anything, on a box without an
NVIDIA GPU; gpu_run.sh's bundle step (cut into parts, carried over calls, joined, installed offline) works."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.bundles import offline_env, tiny_wheel_bundle

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


# -- bench/gpu_run.sh: the prepared run for a lent GPU box ------------------------------------------

RUN_SCRIPT = SCRIPT.with_name("gpu_run.sh")


def gpu_run(*args: str, env: dict, path: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(RUN_SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **({"PATH": path} if path else {}), **env})


@pytest.fixture
def run_dirs(tmp_path) -> dict:
    return {"PARTS": str(tmp_path / "parts"), "STAGE": str(tmp_path / "stage"), "VENV": str(tmp_path / "venv"),
            "OUT": str(tmp_path / "out")}


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this box has nvidia-smi")
def test_gpu_run_refuses_without_a_gpu_before_installing_anything(run_dirs, tmp_path):
    done = gpu_run("run", env=run_dirs)
    assert done.returncode == 3
    assert done.stderr.strip().splitlines() == [
        "error: no NVIDIA GPU here: nvidia-smi is not on PATH "
        "(run bench/gpu_run.sh on a box with an NVIDIA GPU and its driver)"]
    assert done.stdout == "" and not any((tmp_path / name).exists() for name in ("stage", "venv", "out"))


def test_gpu_run_refuses_a_driver_that_lists_no_gpu(run_dirs, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    done = gpu_run("run", env=run_dirs, path=f"{bin_dir}:/usr/bin:/bin")
    assert done.returncode == 3
    assert done.stderr.strip() == ("error: nvidia-smi lists no GPU: No devices were found "
                                   "(check the driver with nvidia-smi)")
    assert not (tmp_path / "stage").exists()


def test_the_bundle_travels_in_parts_over_two_calls_and_installs_offline(run_dirs, tmp_path):
    """pack cuts a real (one-wheel) bundle into parts; the first call's receive keeps part 1 on the box;
    the last call's install joins them, verifies the bundle and installs it with pip offline."""
    bundle = tiny_wheel_bundle(tmp_path / "made")
    packed = gpu_run("pack", str(bundle), env={**run_dirs, "PART_BYTES": "4096"})
    assert packed.returncode == 0, packed.stderr
    parts = sorted(p.name for p in (tmp_path / "parts").glob("part-*"))
    assert len(parts) >= 2 and all(p.endswith(f"-of-{len(parts)}") for p in parts)
    assert f"call {len(parts)}: carry" in packed.stdout and "bench/gpu_run.sh run" in packed.stdout

    # What each device call carries: one part and the checksums.
    calls = []
    for part in parts:
        call = tmp_path / f"call-{len(calls) + 1}"
        call.mkdir()
        (call / part).write_bytes((tmp_path / "parts" / part).read_bytes())
        (call / "SHA256SUMS").write_bytes((tmp_path / "parts" / "SHA256SUMS").read_bytes())
        calls.append(call)
    offline = {**offline_env(tmp_path / "venv"), **run_dirs}

    early = gpu_run("install", env={**offline, "PARTS": str(calls[0])})
    assert early.returncode == 3
    missing = " ".join(str(k) for k in range(2, len(parts) + 1))
    assert early.stderr.strip().splitlines()[-1].startswith(f"error: bundle part(s) {missing} of {len(parts)} "
                                                            "are not here")
    for call in calls[1:-1]:
        received = gpu_run("receive", env={**offline, "PARTS": str(call)})
        assert received.returncode == 0, received.stderr
    installed = gpu_run("install", env={**offline, "PARTS": str(calls[-1])})
    assert installed.returncode == 0, installed.stderr
    assert f"have {len(parts)} of {len(parts)} bundle part(s)" in installed.stdout
    probe = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c",
                            "import farmprobe; print(farmprobe.HELLO)"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert probe.stdout.strip() == "installed offline", probe.stderr


def test_a_damaged_part_is_refused_on_receipt(run_dirs, tmp_path):
    bundle = tiny_wheel_bundle(tmp_path / "made")
    assert gpu_run("pack", str(bundle), env={**run_dirs, "PART_BYTES": "4096"}).returncode == 0
    part = sorted((tmp_path / "parts").glob("part-*"))[0]
    part.write_bytes(part.read_bytes()[:-100])
    done = gpu_run("receive", env=run_dirs)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"error: {part} does not match its sha256 in SHA256SUMS "
                                   "(it was cut short or changed; carry it again)")
    assert not (tmp_path / "stage" / "parts" / part.name).exists()
