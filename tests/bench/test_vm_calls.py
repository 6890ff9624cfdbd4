"""bench/vm_calls.py: a kernel's FLOPs found under its library name, and its speed against the box's peak."""

from types import SimpleNamespace

import pytest
from vm_calls import CallTimes, flops_of, kernel_rows, peak_gflops_of, reached_peak, with_shares_of


def test_a_prepacked_kernel_takes_its_tasks_flops_and_a_builtin_none():
    flops = {"fused_matmul_add": 2e6, "fused_matmul_add_prepacked": 3e6, "softmax": 1e3}
    assert flops_of("softmax", flops) == 1e3
    assert flops_of("fused_matmul_add_prepacked", flops) == 3e6  # its own name first
    assert flops_of("fused_conv2d_prepacked", {"fused_conv2d": 5e6}) == 5e6
    assert flops_of("vm.builtin.alloc_tensor", flops) is None
    assert flops_of("unknown", flops) is None


def test_rows_give_gflops_in_the_model_and_the_share_of_the_peak():
    times = CallTimes(runs=4)
    for _ in range(4):
        times.add("fused_conv2d_prepacked", 0.002)  # 2 ms a call, twice an inference
        times.add("fused_conv2d_prepacked", 0.002)
        times.add("reshape", 0.001)
        times.add("vm.builtin.alloc_tensor", 0.001)
    rows = with_shares_of(kernel_rows(times, {"fused_conv2d": 4e8, "reshape": 0.0}), 400.0)
    assert [r["kernel"] for r in rows] == ["fused_conv2d_prepacked", "reshape"]  # builtins left out, heaviest first
    conv, reshape = rows
    assert conv["ms"] == pytest.approx(4.0) and conv["calls"] == pytest.approx(2.0)
    assert conv["gflop_per_call"] == pytest.approx(0.4)
    assert conv["gflops"] == pytest.approx(200.0) and conv["share_of_peak"] == pytest.approx(0.5)
    assert conv["share_of_model"] == pytest.approx(4.0 / 6.0)  # of every call the VM made, builtins too
    assert reshape["gflops"] is None and reshape["share_of_peak"] is None  # moves bytes, no FLOPs
    assert with_shares_of(kernel_rows(times, {"fused_conv2d": 4e8}), None)[0]["share_of_peak"] is None


def test_the_peak_is_the_fingerprints_measured_one_or_none():
    assert peak_gflops_of(SimpleNamespace(details={"device": {"peak_gflops": 812.5}})) == 812.5
    assert peak_gflops_of(SimpleNamespace(details={"cores": 2})) is None
    assert peak_gflops_of(SimpleNamespace(details=None)) is None


def test_a_kernel_faster_than_the_probe_stands_for_the_peak():
    """The Ice Lake case: the sgemm probe read 224 GFLOP/s, a tuned convolution 319."""
    rates = {"conv alone": 319.0, "conv in the model": 280.0, "dense": 150.0}
    peak = reached_peak(224.0, rates)
    assert peak["peak_gflops"] == 319.0 and peak["probe_gflops"] == 224.0
    assert peak["peak_from"] == "conv alone, faster than the probe (224 GFLOP/s)"
    assert reached_peak(400.0, rates) == {"peak_gflops": 400.0, "probe_gflops": 400.0, "peak_from": "the probe"}
    assert reached_peak(None, {})["peak_gflops"] is None
    assert reached_peak(None, {"k": 10.0})["peak_gflops"] == 10.0  # no probe: what a kernel reached
    rows = with_shares_of([{"gflops": 280.0}, {"gflops": None}], peak["peak_gflops"])
    assert rows[0]["share_of_peak"] == pytest.approx(280.0 / 319.0) and rows[1]["share_of_peak"] is None
