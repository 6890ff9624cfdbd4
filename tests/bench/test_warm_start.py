"""bench/warm_start.py through a real process: model A tuned, then a similar model B with the farm's defaults,
cold and warm at one budget. The seeds' use is asserted here; warm/cold ratios are the bench's figures
(docs/benchmarks.md, "Warm starts"), never asserted."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "warm_start.py"


def warm_start(*args, home: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "FARM_HOME": str(home)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_a_budget_of_nothing_is_refused_with_exit_2(tmp_path):
    done = warm_start("--trials-per-task", "0", home=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: batches and trial budgets must be positive (pass numbers >= 1)"]


@pytest.mark.slow
def test_a_similar_model_is_seeded_and_timed_against_cold_at_the_same_budget(tmp_path):
    plot = tmp_path / "warm-start.png"
    done = warm_start("--donor", "mlp-tiny", "--donor-batch", "4", "--donor-trials-per-task", "4",
                      "--model", "mlp-tiny", "--batch", "1", "--trials-per-task", "4", "--seeds", "0",
                      "--plot", str(plot), "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    (pair,) = document["pairs"]
    # B's warm run measured seeds from A's records, none failed; the cold run none.
    assert pair["seeds"]["seeds_own_fingerprint"] >= 2 and pair["seeds"]["seeds_failed"] == 0, pair
    cold, warm = (next(r for r in document["runs"] if r["warm"] is w) for w in (False, True))
    assert not (cold["warm_start"] or {}).get("seeds_own_fingerprint")
    # One budget (2 tasks x 4 trials) for both: the comparison is at equal budget.
    assert 0 < pair["cold_trials"] <= 8 and 0 < pair["warm_trials"] <= 8
    # Both libraries timed, so the ratio the bench reports exists (its value is the bench's figure).
    assert pair["cold_latency_ms"] > 0 and pair["warm_latency_ms"] > 0 and pair["measured_ratio"] > 0
    assert document["cpu"] and document["command"].startswith("bench/warm_start.py ")
    assert plot.is_file()
