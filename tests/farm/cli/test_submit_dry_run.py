"""`farm submit --dry-run`: the plan a submit would tune by, and nothing written."""

from __future__ import annotations

import json
import sqlite3

import pytest

from support.farm_inprocess import run_farm_inprocess

pytestmark = pytest.mark.slow


def _dump(registry) -> list[str]:
    with sqlite3.connect(registry) as connection:
        rows = list(connection.iterdump())
    connection.close()
    return rows


def test_the_plan_of_a_tuned_model_is_printed_and_the_registry_is_untouched(tuned_mlp_tiny, tmp_path):
    home = tuned_mlp_tiny.copy_to(tmp_path / "home")
    before = _dump(home / "registry.db")
    done = run_farm_inprocess("submit", "mlp-tiny", "llvm", "2", "--dry-run", "--trials", "40", "--json", home=home)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert _dump(home / "registry.db") == before
    assert plan["dry_run"] and plan["tasks"] == len(plan["trial_plan"]["tasks"]) == 2
    assert plan["budget"]["trials"] == 40 and plan["trial_plan"]["planned"] <= 40
    assert plan["registry_hit"] == tuned_mlp_tiny.submitted["artifact"]["id"]
    assert plan["weights_layout"] == tuned_mlp_tiny.submitted["weights_layout"]
    assert plan["reuse"]["mode"] == "auto" and len(plan["reuse"]["per_task"]) == 2
    rate = plan["trials_per_second"]
    assert rate > 0 and plan["estimated_seconds"] == round(plan["trials"] / rate, 1)
    shown = run_farm_inprocess("submit", "mlp-tiny", "llvm", "2", "--dry-run", home=home)
    assert shown.returncode == 0 and "fused_matmul_add_relu1" in shown.stdout and "trials/s" in shown.stdout
    assert _dump(home / "registry.db") == before


def test_the_plan_of_a_first_submit_creates_no_registry_and_has_no_estimate(tmp_path):
    home = tmp_path / "home"
    done = run_farm_inprocess("submit", "mlp-tiny", "llvm", "1", "--dry-run", "--json", home=home)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert not (home / "registry.db").exists()
    assert plan["registry_hit"] is None and plan["estimated_seconds"] is None and plan["trials_per_second"] is None
    assert all(t["action"] == "tune" for t in plan["reuse"]["per_task"])
    shown = run_farm_inprocess("submit", "mlp-tiny", "llvm", "1", "--dry-run", home=home)
    assert "estimate     none" in shown.stdout


@pytest.mark.parametrize("args, says", [
    (["--coordinator", "127.0.0.1:1"], "--dry-run plans here"),
    (["--weights-layout", "packed"], "unknown weights layout"),
    (["--trials", "0"], "--trials"),
    (["--reuse", "most"], "reuse"),
])
def test_bad_input_to_a_dry_run_is_one_line_and_exit_2(tmp_path, args, says):
    done = run_farm_inprocess("submit", "mlp-tiny", "llvm", "1", "--dry-run", *args, home=tmp_path / "home")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr
    assert not (tmp_path / "home" / "registry.db").exists()


def test_a_two_phase_plan_shows_its_first_phase_and_what_is_left(tmp_path):
    home = tmp_path / "home"
    phased = {"FARM_PHASED_PLAN": "1"}
    done = run_farm_inprocess("submit", "mlp-tiny", "llvm", "1", "--dry-run", "--trials", "40", "--json",
                              home=home, env=phased)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)["trial_plan"]
    first = [t["phases"][0] for t in plan["tasks"]]
    assert plan["phases"] == [sum(first), plan["planned"] - sum(first)] and 0 < sum(first) < plan["planned"]
    assert plan["per_task_cap"] == 40  # 4x the average of 20, within the budget
    flat = json.loads(run_farm_inprocess("submit", "mlp-tiny", "llvm", "1", "--dry-run", "--trials", "40",
                                         "--json", home=home).stdout)["trial_plan"]
    assert "phases" not in flat and [t["trials"] for t in flat["tasks"]] == [t["trials"] for t in plan["tasks"]]
    shown = run_farm_inprocess("submit", "mlp-tiny", "llvm", "1", "--dry-run", "--trials", "40", home=home,
                               env=phased)
    assert shown.returncode == 0 and "phase 1" in shown.stdout and f"{sum(first)} trials first" in shown.stdout
    capped = json.loads(run_farm_inprocess("submit", "mlp-tiny", "llvm", "1", "--dry-run", "--trials-per-task",
                                           "8", "--json", home=home, env=phased).stdout)["trial_plan"]
    assert capped["per_task_cap"] == 8  # a cap given stays the cap
    refused = run_farm_inprocess("submit", "mlp-tiny", "llvm", "1", "--dry-run", home=home,
                                 env={"FARM_PHASED_PLAN": "twice"})
    assert refused.returncode == 2 and "FARM_PHASED_PLAN='twice' is neither yes nor no" in refused.stderr
