"""Past logs TVM's own tuner wrote for a plain `llvm` target (no mcpu nor triple, as TVM's tutorials tune)
import on any box, as seeds of the hardware they say, and a default submit of their model
measures them here first; they are never this fingerprint's measurements."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from farm.cli.app import app
from farm.embedded import submit
from farm.submit_values import SubmitRequest
from foundation.meta_schedule.measure import MeasureSettings

from support.tvm_logs import tvm_tuned_log

pytestmark = pytest.mark.slow


def test_a_plain_llvm_log_seeds_a_default_submit_of_its_model(tmp_path):
    from tvm.target import Target

    from farm.session import open_context
    from foundation.compile import extract_tuning_tasks
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.meta_schedule.database.registry_database import RegistryDatabase
    from foundation.models.loading import load_model

    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    install_lean_tensor_intrinsics("llvm")
    plain = Target({"kind": "llvm", "num-cores": 2})  # no mcpu, no triple; MetaSchedule needs num-cores
    tasks = extract_tuning_tasks(load_model("mlp-tiny", 1), plain)  # as a user tunes it with TVM alone
    log = tvm_tuned_log(tmp_path / "tvm-log", plain, tasks)
    assert len(log) > 0

    imported = CliRunner().invoke(app, ["registry", "import", str(tmp_path / "tvm-log"), "--registry", registry,
                                        "--json"])
    assert imported.exit_code == 0, imported.output
    summary = json.loads(imported.stdout)
    assert summary["records"] == 0 and summary["seeds"] == len(log)
    (seed_fp,) = summary["seed_fingerprints"]
    ctx = open_context(registry, "llvm")
    assert seed_fp != ctx.fingerprint.id
    assert len(RegistryDatabase(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, {})) == 0
    ctx.store.dispose()

    done = submit(SubmitRequest("mlp-tiny", "llvm", 1, registry=registry, trials_per_task=4, validation_runs=2,
                                measure=MeasureSettings(min_repeat_ms=5)))
    assert done.job.state == "succeeded", done.job.error
    warm = done.to_json()["warm_start"]
    assert warm["seeds_other_fingerprints"] >= 1, warm
    assert done.reuse is None or done.reuse.reused == 0  # seeds are measured, never reused as this box's
