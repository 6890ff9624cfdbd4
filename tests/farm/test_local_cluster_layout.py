"""Through a coordinator, a default submit after importing TVM's own (plain) logs tunes the plain form and
reuses what they cover, and the job says why, and how its library timed against the untuned build."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from farm.cli.app import app

from support.tvm_logs import tvm_tuned_log

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_the_coordinator_chooses_the_form_tvms_logs_cover(local_farm, tmp_path):
    from farm.session import open_context
    from foundation.compile import extract_tuning_tasks
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.models.loading import load_model

    ctx = open_context(local_farm.registry_url, "llvm", create=True)
    install_lean_tensor_intrinsics("llvm")
    target = ctx.tvm_target()
    tasks = extract_tuning_tasks(load_model("mlp-tiny", 1), target)
    log = tvm_tuned_log(tmp_path / "tvm-log", target, tasks)
    covered = {t.name for t in tasks if log.get_top_k(log.commit_workload(t.mod), 1)}
    ctx.store.dispose()
    imported = CliRunner().invoke(app, ["registry", "import", str(tmp_path / "tvm-log"), "--fingerprint",
                                        ctx.fingerprint.id, "--registry", local_farm.registry_url, "--json"])
    assert imported.exit_code == 0, imported.output

    local_farm.start_coordinator()
    local_farm.start_agent("a1")
    local_farm.wait_agents(1)
    done = json.loads(local_farm.farm("submit", "mlp-tiny", "llvm", "1", "--trials-per-task", "4", "--runs", "3",
                                      "--json", "--timeout", "300").stdout)
    assert done["state"] == "succeeded", done
    assert done["weights_layout"] == "plain" and "plain form" in done["weights_layout_choice"]["why"]
    assert done["reuse"]["reused"] == len(covered) > 0
    speed = done["artifact"]["speed"]
    assert speed["untuned_runs"] >= 5 and speed["runs"] >= 3
    assert done["artifact"]["slower_than_untuned"] is speed["slower_than_untuned"]
    status = json.loads(local_farm.farm("status", done["job"], "--json").stdout)
    assert status["weights_layout_choice"]["why"] == done["weights_layout_choice"]["why"]
