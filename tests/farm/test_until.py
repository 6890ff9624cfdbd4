"""`farm submit --until`: real tuning in rounds, each built and timed here, stopping when good enough."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from farm.embedded import submit
from farm.submit_values import SubmitRequest
from foundation.domain.tuning_rounds import BLOCKS, Stop, parse_goal
from foundation.job_driver.tuning_rounds import UntilRequest
from foundation.meta_schedule.measure import MeasureSettings
from foundation.registry.store import RegistryStore

from support.job_records import measurements_by_job

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
    assert "not beating 0.001 ms" in outcome.summary()
    timing = outcome.rounds[-1].timing
    assert timing.blocks == BLOCKS and timing.blocks_won is None and not timing.beats
    assert timing.candidate_upper_ms >= timing.candidate_ms > 0.001
    # Rounds accumulate: the registry holds every round's records, the report counts them all.
    store = RegistryStore(url)
    assert measurements_by_job(store, result.job.id) == result.report.trials == sum(r.trials for r in outcome.rounds)
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
    assert until["reference_check"]["passed"]
    last = until["rounds"][-1]["timing"]
    assert last["blocks"] == BLOCKS and 0 <= last["blocks_won"] <= BLOCKS
    # Beaten only when the model's upper quartile is at or below onnxruntime's median (timed in
    # the same blocks) and it won most blocks.
    assert last["beats"] == (last["upper_quartile_ms"] <= last["goal_ms"] and last["blocks_won"] * 2 > BLOCKS)
    reached = last["beats"]
    assert (until["stopped"] == "reached") == reached
    assert until["summary"].startswith("reached:" if reached else "not reached")


def test_onnxruntime_is_the_goal_for_a_zoo_model_exported_to_onnx(farm_exe, tmp_path):
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    proc = subprocess.run([farm_exe, "submit", "mlp-tiny", "llvm", "2", "--trials", "8", "--round-trials", "4",
                           "--until", "onnxruntime", "--runs", "3", "--json"], env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)
    until = done["until"]
    assert until["goal"] == "onnxruntime" and until["reference_check"]["passed"]
    assert until["reference_check"]["max_abs_err"] < 1e-3
    assert until["stopped"] in ("reached", "patience", "budget") and 1 <= len(until["rounds"]) <= 2
    for round_ in until["rounds"]:
        assert round_["timing"]["blocks"] == BLOCKS and round_["timing"]["goal_ms"] > 0
    assert done["state"] == "succeeded" and done["artifact"]["validation"]["passed"]
    assert sum(r["trials"] for r in until["rounds"]) == done["trials"] <= 8


def test_an_onnx_model_that_disagrees_with_tvm_is_not_a_goal():
    import tvm

    from foundation.errors import BadInput
    from foundation.job_driver.tuning_rounds import exported_onnx, set_up_goal
    from foundation.models.loading import load_model

    model = load_model("mlp-tiny", 2)
    # The same network with other weights: onnxruntime computes something else than TVM's build
    # with the job's weights.
    other = exported_onnx(model, seed=1)
    with pytest.raises(BadInput, match="disagrees with TVM's untuned build"):
        set_up_goal(UntilRequest(parse_goal("onnxruntime")), model, tvm.target.Target({"kind": "llvm"}), 0, other)
    outcome, judge = set_up_goal(UntilRequest(parse_goal("onnxruntime")), model,
                                 tvm.target.Target({"kind": "llvm"}), 0, exported_onnx(model, seed=0))
    assert outcome.reference_check.passed and outcome.goal_ms == outcome.reference.median_ms > 0
    timing = judge.judge(judge.reference_library, "llvm")
    assert timing.blocks == BLOCKS and timing.blocks_won is not None and timing.goal_ms > 0
    assert timing.candidate_upper_ms >= timing.candidate_ms > 0
