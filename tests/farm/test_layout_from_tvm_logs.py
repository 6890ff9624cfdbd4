"""A default submit uses past logs TVM's own tuner wrote (plain-form workloads), in both modes' planning:
`auto` takes the form the registry's records cover, and says so; asked for another form, they seed it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from farm.cli.app import app
from farm.embedded import submit
from farm.submit_values import SubmitRequest
from foundation.domain.reuse import TaskAction
from foundation.domain.weights_layout import CPU_DEFAULT, WeightsLayout
from foundation.meta_schedule.measure import MeasureSettings

from support.tvm_logs import tvm_tuned_log

pytestmark = pytest.mark.slow


def test_a_default_submit_after_importing_tvms_logs_reuses_every_task_they_cover(tmp_path):
    from farm.session import open_context
    from foundation.compile import extract_tuning_tasks
    from foundation.domain.job_spec import DISTRIBUTED, JobSpec
    from foundation.domain.reuse import ReuseMode
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.job_driver import steps
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.models.loading import load_model

    assert CPU_DEFAULT is not WeightsLayout.PLAIN  # else this test proves nothing
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    ctx = open_context(registry, "llvm", create=True)
    install_lean_tensor_intrinsics("llvm")
    target = ctx.tvm_target()
    loaded = load_model("mlp-tiny", 1)
    tasks = extract_tuning_tasks(loaded, target)  # TVM tunes the model as it comes: plain
    log = tvm_tuned_log(tmp_path / "tvm-log", target, tasks)
    covered = {t.name for t in tasks if log.get_top_k(log.commit_workload(t.mod), 1)}
    assert covered

    imported = CliRunner().invoke(app, ["registry", "import", str(tmp_path / "tvm-log"), "--fingerprint",
                                        ctx.fingerprint.id, "--registry", registry, "--json"])
    assert imported.exit_code == 0, imported.output
    assert json.loads(imported.stdout)["records"] == len(log)

    # A distributed job's plan step (the same step: foundation.job_driver.pipeline) chooses by the same rule.
    spec = JobSpec(mode=DISTRIBUTED, weights_layout="auto", trials_per_task=4, reuse=ReuseMode.AUTO)
    database = tvm_database_for(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, {})
    planned = steps.plan(loaded, target, database, spec, WeightsLayout.PLAIN)
    assert planned.choice.chosen is WeightsLayout.PLAIN
    assert planned.choice.coverage["plain"] > 0.9 and planned.choice.coverage[CPU_DEFAULT.value] == 0.0
    assert {t.name for t in planned.reused.plan.tasks if t.action is not TaskAction.TUNE} == covered
    ctx.store.dispose()

    # A default submit (no --weights-layout) tunes the covered form and reuses every task the log covers.
    request = SubmitRequest("mlp-tiny", "llvm", 1, registry=registry, trials_per_task=4, validation_runs=2,
                            measure=MeasureSettings(min_repeat_ms=5))
    done = submit(request)
    summary = done.to_json()
    assert done.job.state == "succeeded", done.job.error
    assert summary["weights_layout"] == "plain" == summary["artifact"]["weights_layout"]
    assert summary["weights_layout_choice"]["chosen"] == "plain"
    assert "plain form" in summary["weights_layout_choice"]["why"]
    actions = {t.name: t.action for t in done.reuse.tasks}
    assert {name for name, action in actions.items() if action in (TaskAction.SKIP, TaskAction.TOPUP)} == covered
    assert done.reuse.reused == len(covered)

    # The next default submit is answered by that library: the fastest the registry holds for the model.
    again = submit(request)
    assert again.cache_hit and again.artifact.id == done.artifact.id
    assert again.weights_layout is WeightsLayout.PLAIN and "fastest" in again.layout_choice.why

    # Asked for the default form by name, the plain records seed it: a prepacked matmul is the same
    # blocks with its weights marked layout-free, so the plain traces transplant and validate.
    blocked = submit(SubmitRequest("mlp-tiny", "llvm", 1, registry=registry, trials_per_task=4, validation_runs=2,
                                   weights_layout=CPU_DEFAULT.value, measure=MeasureSettings(min_repeat_ms=5)))
    assert blocked.job.state == "succeeded", blocked.job.error
    warm = blocked.to_json()["warm_start"]
    assert warm["seeds_own_fingerprint"] >= 1 and warm["seeds_rejected"] == 0 and warm["seeds_failed"] == 0
