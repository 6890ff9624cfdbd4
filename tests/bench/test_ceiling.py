"""bench/ceiling.py through a real process: refusals, and a real tuned step on resnet-tiny."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CEILING = Path(__file__).resolve().parents[2] / "bench" / "ceiling.py"


def ceiling(*args, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CEILING), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "FARM_HOME": str(home)})


@pytest.mark.parametrize("args", [["no-such-net"], ["mlp-tiny", "--steps", "0"], ["mlp-tiny", "--steps", "x"],
                                  ["mlp-tiny", "--top", "0"]])
def test_bad_arguments_exit_2_with_one_line(tmp_path, args):
    done = ceiling(*args, home=tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("error: ")


@pytest.mark.slow
def test_tuned_steps_resume_and_each_kernel_has_its_onnxruntime_counterpart(tmp_path):
    out = tmp_path / "ceiling.json"
    args = ["resnet-tiny", "--top", "1", "--ort-runs", "2", "--repeat", "1", "--out", str(out)]
    done = ceiling(*args, "--steps", "4", home=tmp_path)
    assert done.returncode == 0, done.stderr
    [task] = json.loads(out.read_text())["tasks"]
    assert "conv2d" in task["task"] and [p["trials"] for p in task["curve"]] == [4]
    # The ORT node is the same convolution: its FLOPs are the task's but for the fused tail.
    ort = task["onnxruntime"]
    assert ort and ort["nodes"] and 0 <= task["gflop"] * 1e9 / ort["flop"] - 1 <= 0.05 and ort["gflops"] > 0
    # A rerun with a further step tunes only the difference: the registry kept the first four.
    done = ceiling(*args, "--steps", "4,8", home=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    [task] = report["tasks"]
    assert [p["trials"] for p in task["curve"]] == [4, 8]
    assert task["curve"][0]["tuning_seconds_this_step"] == 0.0
    assert all(p["gflops"] > 0 and p["vs_numpy_sgemm"] > 0 for p in task["curve"])
    assert report["complete"] and report["peak"]["gflops"] > 0 and report["numpy_sgemm_gflops"] > 0
    fastest = max(report["numpy_sgemm_gflops"], *(p["gflops"] for p in task["curve"]))
    per_ghz = report["peak"]["cores"] * report["peak"]["flops_per_cycle_per_core"]
    assert report["implied_ghz_at_least"] >= fastest / per_ghz * 0.999


@pytest.mark.parametrize(("family", "flags", "per_cycle", "assumed"), [
    ("25", "fpu avx avx2 fma", 32, "AVX2, 256-bit FMA pipes"),  # Zen 3 (family 25 model 1)
    ("25", "fpu avx avx2 fma avx512f", 32, "Zen 4 runs AVX-512 on 256-bit pipes"),  # Zen 4 (model 17)
    ("6", "fpu avx avx2 fma avx512f", 64, "AVX-512 on 512-bit FMA pipes"),  # a Xeon
    ("23", "fpu sse4_2", 16, "SSE, 128-bit"),
])
def test_the_peak_names_the_pipes_the_cpu_has(family, flags, per_cycle, assumed):
    import ceiling as bench_ceiling

    vendor = "AuthenticAMD" if family != "6" else "GenuineIntel"
    cpuinfo = f"vendor_id\t: {vendor}\ncpu family\t: {family}\ncpu MHz\t\t: 2000.000\nflags\t\t: {flags}\n"
    peak = bench_ceiling.peak_gflops(cpuinfo)
    assert (peak["flops_per_cycle_per_core"], peak["assumed"]) == (per_cycle, assumed)
    assert peak["gflops"] == pytest.approx(peak["cores"] * 2.0 * per_cycle)
