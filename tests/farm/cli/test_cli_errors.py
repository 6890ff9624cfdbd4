"""Bad input: one line on stderr saying what is wrong and what to do, non-zero exit, registry unchanged."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def farm(exe: str, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=300)


def assert_refused(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode not in (0, None), proc
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{proc.stderr}"
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert proc.stdout == ""


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


def test_unknown_model_lists_known_ones(farm_exe, home):
    proc = farm(farm_exe, home, "submit", "resnet-19", "llvm", "1")
    assert_refused(proc, "unknown model 'resnet-19'", "resnet-18", "bert")
    assert not (home / "registry.db").exists()


def test_unknown_target(farm_exe, home):
    proc = farm(farm_exe, home, "submit", "mlp-tiny", "tpu", "1")
    assert_refused(proc, "unknown target 'tpu'")
    assert not (home / "registry.db").exists()


def test_batch_below_one(farm_exe, home):
    proc = farm(farm_exe, home, "submit", "mlp-tiny", "llvm", "0")
    assert_refused(proc, "batch must be at least 1")
    assert not (home / "registry.db").exists()


def test_missing_onnx_file(farm_exe, home, tmp_path):
    proc = farm(farm_exe, home, "submit", str(tmp_path / "nope.onnx"), "llvm", "1")
    assert_refused(proc, "no such ONNX file")
    assert not (home / "registry.db").exists()


def test_broken_onnx_file_leaves_registry_unchanged(farm_exe, home, tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"this is not a protobuf \x00\x01\x02" * 10)
    proc = farm(farm_exe, home, "submit", str(broken), "llvm", "1")
    assert_refused(proc, "broken.onnx")
    ls = farm(farm_exe, home, "registry", "ls", "--json")
    if ls.returncode == 0:  # the registry may exist (empty); nothing may be in it
        import json

        counts = json.loads(ls.stdout)["counts"]
        assert all(n == 0 for n in counts.values()), counts


def test_unreachable_registry(farm_exe, home):
    proc = farm(farm_exe, home, "submit", "mlp-tiny", "llvm", "1", "--registry", "postgresql://farm@127.0.0.1:1/farm")
    assert_refused(proc, "cannot reach the registry", "127.0.0.1:1")


def test_run_without_artifact_says_to_submit(farm_exe, home):
    proc = farm(farm_exe, home, "run", "mlp-tiny", "llvm", "4")
    assert_refused(proc, "no tuned library", "farm submit mlp-tiny llvm 4")


def test_cuda_without_a_gpu(farm_exe, home):
    if Path("/dev/nvidia0").exists():
        pytest.skip("this machine has a GPU")
    proc = farm(farm_exe, home, "submit", "mlp-tiny", "cuda", "1")
    assert_refused(proc, "CUDA")
