"""The coordinator's gauges of SQL state, read at scrape time, on SQLite and PostgreSQL."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import text

from coordinator.state_metrics import FarmStateCollector
from foundation.registry.session import Changes

from support.cluster_rows import GPU, TTL, agent_of, at, planned_job


def scrape(collector: FarmStateCollector) -> dict[str, dict[tuple, float]]:
    """Each family's samples as {label values: value}."""
    return {family.name: {tuple(s.labels.values()): s.value for s in family.samples} for family in collector.collect()}


def progress(cluster, job_id: str, task: str, best_us: float, when: float) -> None:
    cluster.events.append_event(job_id, "task_progress", {"shard_id": f"{job_id}/0", "task_name": task, "trials": 1,
                                                          "budget": 8, "best_us": best_us}, at(when))


def test_states_agents_and_the_running_job_latency(store, cluster_store):
    collector = FarmStateCollector(store)
    empty = scrape(collector)
    assert empty["farm_jobs"][("queued",)] == 0 and empty["farm_agents"] == {}

    job = planned_job(cluster_store, tasks=2, shards=2)
    busy, idle, lost = agent_of(cluster_store), agent_of(cluster_store), agent_of(cluster_store, now=at(-100))
    cluster_store.agents.mark_lost_agents(at(1), TTL)
    assert cluster_store.leases.claim_shard(busy.id, GPU, ["cuda"], at(1), TTL) is not None
    state = scrape(collector)
    assert state["farm_jobs"][(store.get_job(job.id).state,)] == 1 and sum(state["farm_jobs"].values()) == 1
    assert state["farm_shards"][("leased",)] == 1 and state["farm_shards"][("pending",)] == 1
    assert state["farm_agents"] == {(GPU, "busy"): 1, (GPU, "idle"): 1, (GPU, "lost"): 1}, (busy, idle, lost)

    # The model's latency once every task has a best: each task's best by its weight (1 here).
    progress(cluster_store, job.id, "task0", 100.0, 2)
    assert scrape(collector)["farm_job_best_latency_seconds"] == {}
    progress(cluster_store, job.id, "task1", 0.0, 3)  # no valid measurement yet
    assert scrape(collector)["farm_job_best_latency_seconds"] == {}
    progress(cluster_store, job.id, "task1", 50.0, 4)
    assert scrape(collector)["farm_job_best_latency_seconds"] == {(job.id, "mlp"): 150e-6}
    progress(cluster_store, job.id, "task0", 120.0, 5)  # worse: the best stays
    progress(cluster_store, job.id, "task0", 80.0, 6)
    assert scrape(collector)["farm_job_best_latency_seconds"] == {(job.id, "mlp"): 130e-6}

    store.update_job(job.id, expect_state="running", state="building")
    after = scrape(collector)
    assert after["farm_job_best_latency_seconds"] == {} and after["farm_jobs"][("building",)] == 1


def test_a_registry_that_fails_leaves_the_sql_gauges_out_of_the_scrape(store, caplog):
    """What the FarmRegistryErrors alert (deploy/prometheus/rules.yml) stands on: while the
    registry fails, the coordinator still answers scrapes but without farm_jobs, and it says why."""
    registry = CollectorRegistry()
    registry.register(FarmStateCollector(store))
    assert 'farm_jobs{state="queued"} 0.0' in generate_latest(registry).decode()
    with store.unit_of_work.write(Changes.STATE) as session:
        session.execute(text("ALTER TABLE jobs RENAME TO jobs_away"))
    try:
        scraped = generate_latest(registry).decode()
        assert "farm_jobs" not in scraped and "farm_shards" not in scraped and "farm_agents" not in scraped
        assert any(r.levelname == "WARNING" and "metrics: cannot read the farm's state" in r.getMessage()
                   for r in caplog.records)
    finally:
        with store.unit_of_work.write(Changes.STATE) as session:
            session.execute(text("ALTER TABLE jobs_away RENAME TO jobs"))
    assert 'farm_jobs{state="queued"} 0.0' in generate_latest(registry).decode()


def test_each_unfinished_job_says_when_it_last_moved(store, cluster_store):
    """What the FarmJobStuck alert stands on: an unfinished job's latest event time, whatever the
    event; a finished job leaves the gauge."""
    collector = FarmStateCollector(store)
    assert scrape(collector)["farm_job_last_event_timestamp_seconds"] == {}
    job = planned_job(cluster_store, tasks=2, shards=2)
    queued, _ = cluster_store.jobs.create_job(model_id="model-1", target_request="cuda", target_kind="cuda", target="",
                                              fingerprint_id=None, trials_budget=8, options={"seed": 1}, now=at(5))
    assert scrape(collector)["farm_job_last_event_timestamp_seconds"] == {
        (job.id, "mlp", "running"): at(0).timestamp(), (queued.id, "mlp", "queued"): at(5).timestamp()}

    progress(cluster_store, job.id, "task0", 100.0, 60)
    assert scrape(collector)["farm_job_last_event_timestamp_seconds"][(job.id, "mlp", "running")] == \
        at(60).timestamp()
    agent = agent_of(cluster_store)
    assert cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(90), TTL) is not None
    assert scrape(collector)["farm_job_last_event_timestamp_seconds"][(job.id, "mlp", "running")] == \
        at(90).timestamp()

    cluster_store.plans.cancel_job(job.id, at(120))
    assert scrape(collector)["farm_job_last_event_timestamp_seconds"] == {
        (queued.id, "mlp", "queued"): at(5).timestamp()}
