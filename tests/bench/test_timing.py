"""bench/timing.py: the agreement check fails on wrong outputs, and the round-robin runs what it says."""

import numpy as np
from timing import Engine, check_outputs, interleaved


def test_outputs_within_tolerance_agree():
    ref = [np.linspace(-5, 5, 100, dtype=np.float32)]
    close = [ref[0] * (1 + 1e-5)]
    check = check_outputs(close, ref, "close")
    assert check.passed and 0 < check.max_abs < 1e-3


def test_a_wrong_output_shape_or_value_disagrees():
    ref = [np.ones((2, 3), np.float32)]
    assert not check_outputs([np.ones((3, 2), np.float32)], ref, "t").passed
    off = ref[0].copy()
    off[1, 2] += 0.05  # 5% of one element: beyond rtol 1e-3 + atol 1e-3 * max(1, 1)
    result = check_outputs([off], ref, "t")
    assert not result.passed and abs(result.max_abs - 0.05) < 1e-6
    assert not check_outputs([], ref, "t").passed


def test_interleaved_rotates_the_order_and_counts_the_runs():
    calls = []

    def engine(name, runs=None):
        return Engine(name, run=lambda x, name=name: calls.append(name) or [x[0]], runs=runs)

    engines = [engine("a"), engine("b"), engine("slow", runs=2)]
    samples = interleaved(engines, [np.zeros(1)], runs=7, warmup=2, rounds=3)
    assert {k: len(v.values) for k, v in samples.items()} == {"a": 7, "b": 7, "slow": 2}
    # warm-up: 2 each, the slow one once; then each round starts with a different engine.
    assert calls[:5] == ["a", "a", "b", "b", "slow"]
    # Each turn is one untimed call (not for slow engines), then its share of the runs
    # (7 over 3 rounds: 3, 2, 2; 2 over 3: 1, 1, 0).
    rounds = [calls[5:14], calls[14:21], calls[21:]]
    assert rounds[0] == ["a"] * 4 + ["b"] * 4 + ["slow"]
    assert rounds[1] == ["b"] * 3 + ["slow"] + ["a"] * 3
    assert rounds[2] == ["a"] * 3 + ["b"] * 3  # the slow engine's runs are used up
    summary = samples["a"].summary()
    assert summary["runs"] == 7 and summary["p10_ms"] <= summary["median_ms"] <= summary["p90_ms"]
