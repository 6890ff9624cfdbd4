"""`farm submit --until`: real tuning in rounds, each built and timed here, stopping when good enough."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from farm.embedded import SubmitRequest, submit
from farm.tuning_rounds import UntilRequest
from foundation.domain.tuning_rounds import Stop, parse_goal
from foundation.meta_schedule.measure import MeasureSettings
from foundation.registry.store import RegistryStore

pytestmark = pytest.mark.slow


def test_an_easy_goal_is_reached_after_the_first_round(farm_exe, tmp_path):
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    proc = subprocess.run([farm_exe, "submit", "mlp-tiny", "llvm", "1", "--trials", "16", "--until", "1000ms",
                           "--runs", "3", "--json"], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)
    until = done["until"]
    assert until["stopped"] == "reached" and until["goal"] == "1000 ms" and until["goal_ms"] == 1000.0
    assert len(until["rounds"]) == 1 and until["rounds"][0]["trials"] == done["trials"] == 4  # a quarter of 16
    assert 0 < until["latency_ms"] <= 1000.0 and until["summary"].startswith("reached: the tuned model ran in")
    assert done["state"] == "succeeded" and done["artifact"]["validation"]["passed"]
    assert done["trial_plan"]["planned"] == 4
    # The job keeps how it ended, for `farm status` and `farm report`.
    status = subprocess.run([farm_exe, "status", done["job"], "--json"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert json.loads(status.stdout)["trial_plan"]["planned"] == 4


def test_an_unreachable_goal_stops_at_patience_or_the_budget_and_says_which(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    request = SubmitRequest(model="mlp-tiny", target="llvm", batch=1, registry=url, trials=6,
                            measure=MeasureSettings(min_repeat_ms=5), validation_runs=1,
                            until=UntilRequest(parse_goal("0.001ms"), patience=1, round_trials=2))
    result = submit(request)
    assert result.job.state == "succeeded", result.job.error  # not good enough is not a failure
    outcome = result.until
    assert outcome.stopped in (Stop.PATIENCE, Stop.BUDGET)
    assert outcome.latency_ms > 0.001
    assert 1 <= len(outcome.rounds) <= 3 and all(r.trials <= 2 for r in outcome.rounds)
    if outcome.stopped is Stop.BUDGET:
        assert len(outcome.rounds) == 3 and result.report.trials == 6
        assert outcome.summary().startswith("not reached, budget spent:")
    else:
        assert outcome.summary().startswith("not reached, no improvement:")
    assert "above 0.001 ms" in outcome.summary()
    # Rounds accumulate: the registry holds every round's records, the report counts them all.
    store = RegistryStore(url)
    assert len(store.job_measurements(result.job.id)) == result.report.trials == sum(r.trials for r in outcome.rounds)
    stored = store.get_job(result.job.id).options
    assert stored["until"]["stopped"] == outcome.stopped.value and stored["until_goal"] == "0.001 ms"
    assert stored["trial_plan"]["planned"] == result.report.trials
    store.dispose()


def test_onnxruntime_is_the_goal_for_an_onnx_file(farm_exe, tmp_path):
    from support.onnx_models import write_small_cnn

    model = write_small_cnn(tmp_path / "cnn.onnx")
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    proc = subprocess.run([farm_exe, "submit", str(model), "llvm", "1", "--trials", "8", "--round-trials", "4",
                           "--until", "onnxruntime", "--runs", "3", "--json"], env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    until = json.loads(proc.stdout)["until"]
    assert until["goal"] == "onnxruntime" and until["reference_latency_ms"]["runs"] == 20
    assert until["goal_ms"] == until["reference_latency_ms"]["median"] > 0
    assert until["stopped"] in ("reached", "patience", "budget")
    reached = until["latency_ms"] <= until["goal_ms"]
    assert (until["stopped"] == "reached") == reached
    assert until["summary"].startswith("reached:" if reached else "not reached")
