"""Warm starts in the distributed farm, with real processes: the coordinator sends each shard the
seeds of its tasks and names the fingerprint's cost model; the agent fetches and checks the model,
measures the seeds first, starts its search from the model, and reports what it used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import grpc
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from foundation.registry import RegistryStore

from support.polling import wait_for
from support.prometheus_scrape import Scrape
from support.tuned_registry import TunedHome

pytestmark = pytest.mark.slow

ON_SQLITE = pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
# Plain weights, both jobs: the seeds come from the same fused operators at another batch.
SUBMIT = ["submit", "mlp-tiny", "llvm", "2", "--trials-per-task", "4", "--runs", "3", "--weights-layout", "plain"]


def _donors(registry_url: str, tuned: TunedHome):
    """The registry (SQLite) a copy of ``tuned``'s, where mlp-tiny at batch 4 was tuned cold (the donors),
    and a cost model trained on its records stored as the fingerprint's: (fingerprint id, the stored
    model, the model, the donors' workloads)."""
    from tvm.s_tir.meta_schedule.database import Workload

    from foundation.hardware.targets import to_tvm_target
    from foundation.hardware.versions import tvm_version
    from foundation.meta_schedule.warm.cost_models import KIND, learn, model_bytes, new_model

    submitted = tuned.submitted
    assert submitted["state"] == "succeeded" and submitted["weights_layout"] == "plain", submitted
    path = Path(make_url(registry_url).database)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(tuned.home / "registry.db", path)
    fingerprint = submitted["fingerprint"]
    store = RegistryStore(registry_url, create=False)
    try:
        job = store.get_job(submitted["job"])
        records = [r for r in store.records.all_records(fingerprint_id=fingerprint) if r.mean_sec is not None]
        workloads = {i: Workload.from_json(json.loads(j)).mod
                     for i, (_, j) in store.records.get_workloads({r.workload_id for r in records}).items()}
        # Fewer records than a refresh waits for (MIN_SAMPLES): trained here, as a refresh would.
        model = new_model()
        assert learn(model, to_tvm_target(json.loads(job.target)), workloads, records) == len(records)
        stored = store.cost_models.save(fingerprint, tvm_version(), KIND, model_bytes(model),
                                 last_record_id=max(r.id for r in records), samples=model.data_size,
                                 workloads=len(model.data))
        return fingerprint, stored, model, set(workloads)
    finally:
        store.dispose()


def _candidates(registry_url: str, job_id: str):
    """A TuneContext of one of the job's workloads and its measured records as candidates."""
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import Workload
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
    from tvm.s_tir.schedule import Trace

    from foundation.hardware.targets import to_tvm_target

    store = RegistryStore(registry_url, create=False)
    try:
        records = [r for r in store.records.all_records() if r.job_id == job_id and r.mean_sec is not None]
        workload_id = max({r.workload_id for r in records}, key=lambda w: sum(r.workload_id == w for r in records))
        [(_, mod_json)] = store.records.get_workloads({workload_id}).values()
        target = to_tvm_target(json.loads(store.get_job(job_id).target))
    finally:
        store.dispose()
    mod = Workload.from_json(json.loads(mod_json)).mod
    candidates = []
    for record in (r for r in records if r.workload_id == workload_id):
        schedule = Schedule(mod)
        Trace.apply_json_to_schedule(json.loads(record.trace), schedule)
        candidates.append(MeasureCandidate(schedule, ArgInfo.from_entry_func(schedule.mod, remove_preproc=True)))
    return ms.TuneContext(mod=mod, target=target, task_name="check"), candidates


@ON_SQLITE
def test_a_distributed_job_measures_its_seeds_first_and_starts_from_the_stored_cost_model(
        make_cluster, registry_url, tmp_path, tuned_mlp_tiny_batch_4):
    from agent.cost_models import CostModelCache, checked
    from foundation.meta_schedule.warm.cost_models import model_from_bytes, new_model
    from foundation.wire import farm_pb2, farm_pb2_grpc

    fingerprint, stored, trained, donor_workloads = _donors(registry_url, tuned_mlp_tiny_batch_4)
    # One record a report: the registry stores a report's records in the order of their digests
    # (PostgreSQL's writers lock in one order), so only reports of one keep the order measured.
    farm = make_cluster(metrics=True, coordinator_options=(
        "--records-per-report", "1", "--report-rate", "1000", "--report-jitter", "0"))
    farm.start_coordinator()
    farm.start_agent("a1")
    [agent] = farm.wait_agents(1)
    assert agent["fingerprint_id"] == fingerprint  # the donors' box

    done = json.loads(farm.farm(*SUBMIT, "--json", "--timeout", "400").stdout)
    assert done["state"] == "succeeded" and done["artifact"]["validation"]["passed"], done
    job_id = done["job"]
    status = json.loads(farm.farm("status", job_id, "--json").stdout)
    warm = status["warm_start"]
    # Seeds of the batch-4 donors were offered, measured first on the agent, and reported.
    assert warm["seeds_own_fingerprint"] >= 2 and warm["seeds_other_fingerprints"] == 0, warm
    assert warm["seeds_offered"] >= warm["seeds_own_fingerprint"] + warm["seeds_rejected"], warm
    assert warm["seeds_failed"] == 0 and warm["shards"] == 1, warm
    # The search started from the stored model, the one the registry holds.
    assert warm["pretrained_cost_model"] is True and warm["cost_model_sha256"] == stored.sha256, warm
    described = farm.farm("status", job_id).stdout
    assert "Warm start" in described and f"{warm['seeds_own_fingerprint']} seeds measured first" in described
    assert f"sha256 {stored.sha256[:12]}" in described
    assert (f"starts warm: {warm['seeds_offered']} seeds offered, cost model {stored.kind} {stored.sha256[:12]}"
            in farm.log("a1"))
    # Then the coordinator teaches the fingerprint's model what the agent reported, as an embedded job does.
    wait_for(lambda: f"cost model of {fingerprint}" in farm.log("coordinator"), 120, "the coordinator to learn")
    report = json.loads(farm.farm("report", job_id, "--out", str(tmp_path / "report"), "--registry", registry_url,
                                  "--json").stdout)
    assert report["warm_start"] == warm
    assert "| warm start |" in (tmp_path / "report" / f"{job_id}.md").read_text()

    # Seeds are never hits nor build answers: what the job stored are its own workloads' records,
    # each measured on the agent; no donor trace was stored unmeasured or under a donor workload.
    store = RegistryStore(registry_url, create=False)
    try:
        mine = [r for r in store.records.all_records() if r.job_id == job_id]
        measured = [workload for workload, _ in store.records.job_measurements(job_id)]
    finally:
        store.dispose()
    assert mine and all(r.run_secs for r in mine), mine
    # The agent measured each task's best seed before any task's second and before any task's
    # untuned form (foundation.meta_schedule.untuned_form), as the embedded mode does.
    from foundation.meta_schedule.untuned_form import is_untuned_trace_json

    tasks = len(set(measured))
    first = [(r.workload_id, is_untuned_trace_json(r.trace)) for r in sorted(mine, key=lambda r: r.id)][:tasks]
    # One seed a task at least; a second where the task's best seed beat its untuned form (the
    # others are held back, their trials searched), measured after every task's best.
    assert warm["seeds_own_fingerprint"] >= tasks, warm
    assert not any(untuned for _, untuned in first) and len({w for w, _ in first}) == tasks, first
    assert not {r.workload_id for r in mine} & donor_workloads
    assert sum(r.mean_sec is not None for r in mine) >= warm["seeds_own_fingerprint"]

    # farm_warm_start_seeds_total: on the agent where it measured them, and the fleet's on the coordinator.
    for port in (farm.metrics_ports["a1"], farm.metrics_ports["coordinator"]):
        scrape = Scrape(port)
        assert scrape.value("farm_warm_start_seeds_total", source="own_fingerprint") == warm["seeds_own_fingerprint"]
        assert scrape.value("farm_warm_start_seeds_total", source="other_fingerprint") == 0

    # The agent's way to the model, against this coordinator: fetched once, then kept; loaded, it
    # predicts what the trained model predicts, which an untrained model does not.
    ref = farm_pb2.CostModelRef(id=stored.id, kind=stored.kind, sha256=stored.sha256, size_bytes=stored.size)
    with grpc.insecure_channel(farm.address) as channel:
        stub = farm_pb2_grpc.FarmAgentStub(channel)
        cache = CostModelCache()
        fetched = cache.get(stub, agent["id"], ref)
        assert fetched.content is not None and cache.get(stub, agent["id"], ref).content == fetched.content
        assert cache.fetched == 1
        context, candidates = _candidates(registry_url, job_id)
        loaded = model_from_bytes(fetched.content).predict(context, candidates)
        trained.num_warmup_samples = 0  # below its warm-up an XGBModel predicts at random, trained or not
        assert list(loaded) == list(trained.predict(context, candidates))
        assert list(loaded) != list(new_model().predict(context, candidates))

        # A sha256 the registry does not hold is refused with NOT_FOUND, and the agent starts untrained.
        wrong = farm_pb2.CostModelRef(id=stored.id, sha256="0" * 64)
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetCostModel(farm_pb2.GetCostModelRequest(agent_id=agent["id"], id=stored.id, sha256="0" * 64),
                              timeout=30)
        assert refused.value.code() is grpc.StatusCode.NOT_FOUND and "sha256" in refused.value.details()
        missed = CostModelCache().get(stub, agent["id"], wrong)
        assert missed.content is None and "NOT_FOUND" in missed.note
        # Bytes that no longer match their sha256 are not sent (DATA_LOSS), nor kept if received.
        engine = create_engine(registry_url)
        with engine.begin() as connection:
            connection.execute(text("UPDATE cost_models SET blob = :blob WHERE id = :id"),
                               {"blob": b"not the model", "id": stored.id})
        engine.dispose()
        damaged = CostModelCache().get(stub, agent["id"], ref)
        assert damaged.content is None and "DATA_LOSS" in damaged.note, damaged
    assert checked(b"not the model", stored.sha256).content is None
    assert "refused" in checked(b"not the model", stored.sha256).note
