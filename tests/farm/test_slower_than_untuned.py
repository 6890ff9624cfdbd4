"""Never slower than untuned: a job whose only records build a library slower than TVM's untuned build
keeps the untuned build, and says so loudly (summary, status, `--json`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.embedded import submit
from farm.submit_values import SubmitRequest
from foundation.config import KEEP_SLOWER_ENV
from foundation.meta_schedule.measure import MeasureSettings

from support.tvm_records import build_and_time

pytestmark = pytest.mark.slow


def _slow_trace(mod):  # type: ignore[no-untyped-def]
    """A real schedule that is slow by construction: the reduction loop moved outside the output's
    loops, and the innermost made parallel over 2 outputs, so the matmul launches a parallel region
    for every step of the reduction and every pair of outputs (4,096 for mlp-tiny's first): over 1 ms
    on every core, so `farm.load` would run it on every core, where it is timed."""
    import tvm

    sch = tvm.s_tir.Schedule(mod)
    for block in sch.get_child_blocks(sch.get_sblock("root", func_name="main")):
        if any(int(iv.iter_type) == 2 for iv in sch.get(block).iter_vars):  # a reduction (matmul)
            *_, spatial, reduction = sch.get_loops(block)
            outer, inner = sch.split(spatial, [None, 2])
            sch.reorder(reduction, outer, inner)
            sch.parallel(inner)
            return sch
    raise AssertionError("the task has no reduction block")


def _measure(sch, target):  # type: ignore[no-untyped-def]
    """The schedule built and timed by the farm's own builder and runner, as tuning measures a candidate."""
    from foundation.meta_schedule.measure import WorkerPools

    pools = WorkerPools(MeasureSettings(min_repeat_ms=5))
    try:
        builder, runner = pools.get("llvm")
        return build_and_time(builder, runner, sch.mod, target)
    finally:
        pools.close()


def _registry_with_slow_records(registry: str, batch: int = 1):  # type: ignore[no-untyped-def]
    """A registry holding, for each of mlp-tiny's matmul tasks (all of its tasks), one record of
    `_slow_trace`, measured here: (``registry``, the tasks, the target, the slow tasks)."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from farm.session import open_context
    from foundation.compile import extract_tuning_tasks
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.models.loading import load_model

    ctx = open_context(registry, "llvm", create=True)
    install_lean_tensor_intrinsics("llvm")
    target = ctx.tvm_target()
    tasks = extract_tuning_tasks(load_model("mlp-tiny", batch), target)
    ctx.store.upsert_fingerprint(ctx.fingerprint.id, ctx.fingerprint.kind, ctx.fingerprint.summary,
                                 ctx.fingerprint.details)
    database = tvm_database_for(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, ctx.software)
    slow = [t for t in tasks if t.flop > 0 and "matmul" in t.name]
    assert slow
    for task in slow:
        sch = _slow_trace(task.mod)
        run_secs, args = _measure(sch, target)
        database.commit_tuning_record(TuningRecord(sch.trace, database.commit_workload(task.mod), run_secs,
                                                   target, args))
    database.flush()
    ctx.store.dispose()
    return registry, tasks, target, slow


def test_a_library_slower_than_the_untuned_build_is_not_kept(tmp_path, monkeypatch):
    # Batch 4: each matmul's batch loop stays outside the slow trace's regions, 4x as many as at
    # batch 1, so the library is well over SERIAL_BELOW_MS on every core and runs on every core.
    registry, _tasks, _target, _slow = _registry_with_slow_records(f"sqlite:///{tmp_path / 'registry.db'}", batch=4)

    # A fast library loaded earlier in this process (farm.load, or an earlier test in this worker)
    # left TVM's pool on one thread; validation still chooses the threads on every core.
    from foundation.runtime.threads import use_threads

    use_threads(1)
    monkeypatch.delenv(KEEP_SLOWER_ENV)  # the suite stores slower libraries (tests/conftest.py); a user's farm does not
    # Reuse in full: the matmul tasks are built from their (slow) records, the rest tuned a little.
    done = submit(SubmitRequest("mlp-tiny", "llvm", 4, registry=registry, trials_per_task=4, reuse="full",
                                weights_layout="plain", validation_runs=20, measure=MeasureSettings(min_repeat_ms=5)))
    summary = done.to_json()
    assert done.job.state == "succeeded", done.job.error
    speed = summary["artifact"]["speed"]
    assert summary["slower_than_untuned"] is True and speed["slower_than_untuned"] and speed["kept_untuned"]
    assert speed["ratio"] >= 1.05 and speed["runs"] >= 20 and speed["untuned_runs"] >= 5
    assert speed["threads"] > 1, speed  # timed as it would run: on every core
    # The untuned build is what was stored, at its own latency, and the job's status says so.
    assert summary["artifact"]["weights_layout"] == "plain"
    assert summary["artifact"]["latency_ms"]["median"] == pytest.approx(speed["untuned_median_ms"])
    assert "KEPT THE UNTUNED BUILD" in done.job.status


def test_a_task_whose_untuned_form_timed_faster_is_built_untuned(tmp_path):
    """Every tuning run measures each task's untuned form first (foundation.meta_schedule.untuned_form),
    as a record like any other. With the tasks' only other records slow by construction and one trial a
    task (that one), the build takes every task's untuned form: the stored library is TVM's untuned
    build byte for byte, and the summary and `--json` name the tasks built untuned."""
    from farm.registry_jobs import RegistryJobs
    from foundation.compile import build_library
    from foundation.meta_schedule.untuned_form import is_untuned_trace_json
    from foundation.models.loading import load_model
    from foundation.registry import RegistryStore

    registry, tasks, target, slow = _registry_with_slow_records(f"sqlite:///{tmp_path / 'registry.db'}")
    done = submit(SubmitRequest("mlp-tiny", "llvm", 1, registry=registry, trials_per_task=1, reuse="off",
                                weights_layout="plain", validation_runs=5, measure=MeasureSettings(min_repeat_ms=5)))
    summary = done.to_json()
    assert done.job.state == "succeeded", done.job.error
    assert summary["built_untuned"] == {"tasks": [t.name for t in tasks], "of": len(tasks)}
    assert [t["trials"] for t in summary["tasks"]] == [1] * len(tasks)  # each task's one trial: its untuned form

    store = RegistryStore(registry, create=False)
    try:
        records = store.records.all_records(fingerprint_id=summary["fingerprint"])
        mine = [r for r in records if r.job_id == done.job.id]
        assert len(mine) == len(tasks) and all(is_untuned_trace_json(r.trace) for r in mine)
        for record in mine:  # each task's best record: ahead of its slow one
            others = [r for r in records if r.workload_id == record.workload_id and r.job_id != done.job.id]
            assert len(others) == 1 and _mean(record.run_secs) < _mean(others[0].run_secs)
        assert RegistryJobs(store).document(store.get_job(done.job.id))["built_untuned"] == summary["built_untuned"]
        library = store.get_artifact_library(summary["artifact"]["id"])
    finally:
        store.dispose()
    assert library == build_library(load_model("mlp-tiny", 1), target, None)


def _mean(run_secs) -> float:  # type: ignore[no-untyped-def]
    return sum(run_secs) / len(run_secs)


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_a_distributed_job_measures_untuned_forms_on_its_agent_and_says_which_tasks_it_built_untuned(local_farm):
    """The same on an agent: its shard's tuning measures each task's untuned form first and reports it
    like any record; the coordinator's build takes it, and the client's `--json` names the tasks."""
    from foundation.meta_schedule.untuned_form import is_untuned_trace_json
    from foundation.registry import RegistryStore

    Path(local_farm.registry_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    _, tasks, _, _ = _registry_with_slow_records(local_farm.registry_url)
    local_farm.start_coordinator()
    local_farm.start_agent("a1")
    local_farm.wait_agents(1)
    done = json.loads(local_farm.farm("submit", "mlp-tiny", "llvm", "1", "--trials-per-task", "1", "--reuse", "off",
                                      "--weights-layout", "plain", "--runs", "3", "--json", "--timeout", "300").stdout)
    assert done["state"] == "succeeded", done
    assert done["built_untuned"] == {"tasks": [t.name for t in tasks], "of": len(tasks)}, done
    status = json.loads(local_farm.farm("status", done["job"], "--json").stdout)
    assert status["built_untuned"] == done["built_untuned"]
    store = RegistryStore(local_farm.registry_url)
    try:
        mine = [r for r in store.records.all_records() if r.job_id == done["job"]]
    finally:
        store.dispose()
    assert len(mine) == len(tasks) and all(is_untuned_trace_json(r.trace) for r in mine)
