"""Past logs: a database TVM's own `ms.tune_tasks` wrote, imported into a fresh registry for this box's
fingerprint, serves reuse, and exports back into TVM's format."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from support.tvm_logs import tvm_tuned_log

pytestmark = pytest.mark.slow


def farm(exe: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *args], env=dict(os.environ), capture_output=True, text=True, timeout=600)


def _top(database, mod, k=10):  # type: ignore[no-untyped-def]
    return [(json.dumps(r.as_json()[0], sort_keys=True), [float(s) for s in r.run_secs])
            for r in database.get_top_k(database.commit_workload(mod), k)]


def test_tvm_logs_into_a_fresh_registry_serve_reuse_and_export_back(farm_exe, tmp_path):
    from farm.session import open_context

    ctx = open_context(f"sqlite:///{tmp_path / 'unused.db'}", "llvm", create=True)
    ctx.store.dispose()
    from foundation.compile import extract_tuning_tasks
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.models.loading import load_model

    install_lean_tensor_intrinsics("llvm")
    from tvm.s_tir import meta_schedule as ms

    target = ctx.tvm_target()
    tasks = extract_tuning_tasks(load_model("mlp-tiny", 1), target)
    log = tvm_tuned_log(tmp_path / "tvm-log", target, tasks)
    measured = [t.name for t in tasks if log.get_top_k(log.commit_workload(t.mod), 1)]
    assert measured and len(log) >= len(tasks)

    registry = f"sqlite:///{tmp_path / 'fresh' / 'registry.db'}"
    # For this box's fingerprint, named: a fresh registry does not know it yet, and gets it.
    proc = farm(farm_exe, "registry", "import", str(tmp_path / "tvm-log"), "--fingerprint", ctx.fingerprint.id,
                "--registry", registry, "--json")
    assert proc.returncode == 0, proc.stderr
    imported = json.loads(proc.stdout)
    assert (imported["fingerprint"], imported["records"], imported["workloads"]) == (
        ctx.fingerprint.id, len(log), len(tasks))

    # The imported records are this box's measurements: a job reusing them in full tunes nothing.
    proc = farm(farm_exe, "submit", "mlp-tiny", "llvm", "1", "--reuse", "full", "--trials-per-task", "4",
                "--runs", "2", "--weights-layout", "plain", "--registry", registry, "--json")
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)
    assert done["state"] == "succeeded" and done["artifact"]["validation"]["passed"]
    assert {t["task"] for t in done["reuse"]["per_task"] if t["action"] == "skip"} == set(measured)
    assert done["reuse"]["trials"] == 4 * (len(tasks) - len(measured))
    assert done["trials"] <= done["reuse"]["trials"]
    assert set(measured) == {t.name for t in tasks}  # 4 candidates each: every task has a valid one
    # Nothing measured, yet the job has a report: what it reused, and the library it built.
    proc = farm(farm_exe, "report", done["job"], "--out", str(tmp_path / "report"), "--registry", registry, "--json")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "report" / f"{done['job']}.md").read_text()
    assert f"| reuse | reused {len(tasks)} of {len(tasks)} tasks ({len(tasks)} skipped)" in page
    assert "every task was reused" in page and done["artifact"]["id"] in page

    # Exported, it is TVM's format again, with TVM's own ranking.
    out = tmp_path / "exported"
    proc = farm(farm_exe, "registry", "export", str(out), "--fingerprint", ctx.fingerprint.id,
                "--registry", registry, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["records"] == len(log)
    exported = ms.database.JSONDatabase(work_dir=str(out), allow_missing=False)
    for task in tasks:
        assert _top(exported, task.mod) == _top(log, task.mod)

    # Another fingerprint the registry does not know: one line that says what to do.
    proc = farm(farm_exe, "registry", "import", str(tmp_path / "tvm-log"), "--fingerprint", "cpu-000000000000",
                "--registry", registry)
    assert proc.returncode == 3
    (line,) = [x for x in proc.stderr.splitlines() if x.strip()]
    assert line.startswith("error: fingerprint 'cpu-000000000000' is not in the registry")
    assert ctx.fingerprint.id in line
