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


def test_a_missing_donor_registry_is_refused_with_exit_2_and_nothing_tuned(tmp_path):
    missing = tmp_path / "donors.db"
    done = warm_start("--donor-registry", str(missing), home=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: no registry file at {missing} (")
    assert not missing.exists() and not any(tmp_path.iterdir())


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

    # A saved run re-summarised by the script's rules gives the same pairs it printed.
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(document))
    again = warm_start("--resummarise", str(saved), home=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(saved.read_text())["pairs"] == document["pairs"]


def test_tasks_a_run_never_measures_do_not_hide_its_estimate():
    sys.path.insert(0, str(SCRIPT.parent))
    import warm_start as bench

    # (trials, estimate in s, tasks not yet measured): two tasks are planned no trial and stay unmeasured.
    cold = [(1, 9.0, 4), (2, 5.0, 3), (3, 4.0, 2), (6, 3.0, 2)]
    warm = [(1, 6.0, 3), (2, 2.5, 2), (5, 2.0, 2)]
    assert bench._every_task_measured_at(cold) == 3 and bench._final(cold) == 3.0
    assert bench._trials_to_reach(warm, bench._final(cold)) == 2
    # A run that ends with every task measured counts only its complete points.
    assert bench._every_task_measured_at([(1, 5.0, 1), (2, 4.0, 0)]) == 2
    assert bench._final([]) is None and bench._every_task_measured_at([]) is None
