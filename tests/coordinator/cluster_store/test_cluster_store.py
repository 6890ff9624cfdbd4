"""ClusterStore on SQLite and PostgreSQL: agents, plans, leases, reports, expiry, events."""

from __future__ import annotations

import threading

import pytest
from alembic import command
from sqlalchemy import text

from coordinator.cluster_store import AgentMismatch, ClusterStore, UnknownAgent
from foundation.domain.job_rollup import JobOutcome
from foundation.domain.jobs import JobState
from foundation.domain.shards import ShardState
from foundation.domain.transitions import IllegalTransition
from foundation.domain.weights_layout import WeightsLayout
from foundation.registry import RegistryStore, migrate, upgrade_registry
from foundation.registry.engine import create_registry_engine, parse_registry_url
from foundation.registry.entities import ReportedBatch, ShardClaim

from support.cluster_rows import (
    CUDA_TARGET,
    GPU,
    OTHER_GPU,
    T0,
    TTL,
    agent_of,
    at,
    planned_job,
    records_of,
    validating_job,
)

PLAIN, PREPACKED = WeightsLayout.PLAIN, WeightsLayout.PREPACKED

# -- agents ------------------------------------------------------------------------------


def test_register_reregister_and_unknown_heartbeat(cluster_store):
    agent = agent_of(cluster_store)
    assert agent.id.startswith("agent-") and agent.state == "active"
    assert agent.target_kinds == ["cuda", "llvm"]
    again = agent_of(cluster_store, now=at(5), previous_agent_id=agent.id)
    assert again.id == agent.id and again.last_heartbeat_at == at(5)
    fresh = agent_of(cluster_store, previous_agent_id="agent-forgotten")
    assert fresh.id != "agent-forgotten"

    assert cluster_store.agents.heartbeat("agent-nobody", at(6)) is None
    assert cluster_store.agents.heartbeat(agent.id, at(10)).last_heartbeat_at == at(10)
    lost = cluster_store.agents.mark_lost_agents(at(10 + TTL + 1), TTL)
    assert {a.id for a in lost} == {agent.id, fresh.id}
    assert cluster_store.agents.agents_matching("cuda") == {}
    assert cluster_store.agents.heartbeat(agent.id, at(50)).state == "active"  # alive again
    assert cluster_store.agents.agents_matching("cuda") == {GPU: 1}
    assert cluster_store.agents.agents_matching("vulkan") == {}
    assert len(cluster_store.agents.list_agents(include_lost=False)) == 1


# -- plans and claims --------------------------------------------------------------------


def test_plan_starts_the_job_and_only_a_matching_agent_claims(cluster_store, store):
    job = planned_job(cluster_store)
    assert store.get_job(job.id).state == "running"
    assert store.get_job(job.id).status == "tuning: 0/2 shards done"
    assert [s.state for s in cluster_store.plans.shards_of(job.id)] == [ShardState.PENDING] * 2
    with pytest.raises(IllegalTransition):  # running -> running is not a transition
        cluster_store.plans.add_job_plan(job.id, [], [], T0)

    llvm_only = agent_of(cluster_store, kinds=["llvm"])
    other_box = agent_of(cluster_store, fingerprint_id=OTHER_GPU)
    right = agent_of(cluster_store)
    assert cluster_store.leases.claim_shard(llvm_only.id, GPU, ["llvm"], T0, TTL) is None
    assert cluster_store.leases.claim_shard(right.id, GPU, ["vulkan"], T0, TTL) is None
    assert cluster_store.leases.claim_shard(other_box.id, OTHER_GPU, ["cuda"], T0, TTL) is None
    with pytest.raises(AgentMismatch):
        cluster_store.leases.claim_shard(other_box.id, GPU, ["cuda"], T0, TTL)
    with pytest.raises(UnknownAgent):
        cluster_store.leases.claim_shard("agent-nobody", GPU, ["cuda"], T0, TTL)

    lease = cluster_store.leases.claim_shard(right.id, GPU, ["cuda"], at(1), TTL)
    assert lease.job.id == job.id and lease.attempt == 1 and lease.target == CUDA_TARGET
    assert lease.shard.state is ShardState.LEASED and lease.shard.agent_id == right.id
    assert lease.expires_at == at(1 + TTL) == lease.shard.heartbeat_deadline
    assert [t.name for t in lease.tasks] == lease.shard.task_names
    # The costliest shard first, as foundation.domain.shards.next_pending orders them.
    assert lease.shard.cost == max(s.cost for s in cluster_store.plans.shards_of(job.id))
    assert [s.id for s in cluster_store.leases.leases_of_agent(right.id)] == [lease.shard.id]


def test_claims_of_many_agents_share_transactions_across_jobs(cluster_store, store):
    first = planned_job(cluster_store, tasks=2, shards=2)
    second = planned_job(cluster_store, tasks=3, shards=3)
    agents = [agent_of(cluster_store) for _ in range(6)]
    claims = [ShardClaim(a.id, GPU, ("cuda",)) for a in agents]
    claims.insert(2, ShardClaim("agent-nobody", GPU, ("cuda",)))
    claims.insert(4, ShardClaim(agents[0].id, OTHER_GPU, ("cuda",)))
    version = store.unit_of_work.state_version
    answers = cluster_store.leases.claim_shards(claims, at(1), TTL)
    assert isinstance(answers[2], UnknownAgent) and isinstance(answers[4], AgentMismatch)
    leases = [a for i, a in enumerate(answers) if i not in (2, 4)]
    # Oldest job first (both were created at T0: then by id), all its shards before the next's.
    older, newer = sorted([(first.id, 2), (second.id, 3)])
    assert [lease.job.id for lease in leases[:5]] == [older[0]] * older[1] + [newer[0]] * newer[1]
    assert leases[5] is None, "five shards for six agents"
    assert [lease.shard.agent_id for lease in leases[:5]] == [a.id for a in agents[:5]]
    assert len({lease.shard.id for lease in leases[:5]}) == 5
    assert all(lease.attempt == 1 and lease.shard.state is ShardState.LEASED for lease in leases[:5])
    assert store.unit_of_work.state_version == version + 2, "one write transaction per job"
    kinds = [e.kind for e in cluster_store.events.events_after(second.id)]
    assert kinds.count("shard_changed") == 3


def test_racing_claimers_lease_every_shard_exactly_once(cluster_store, registry_url):
    shard_count = 12
    job = planned_job(cluster_store, tasks=shard_count, shards=shard_count)
    # A second store on its own engine: another coordinator process, as far as locks go.
    second = RegistryStore(registry_url)
    stores = [cluster_store, ClusterStore(second)]
    agents = [agent_of(cluster_store) for _ in range(4)]
    leases, errors = [], []
    barrier = threading.Barrier(len(agents))

    def claim_all(index: int) -> None:
        store = stores[index % 2]
        barrier.wait()
        try:
            while (lease := store.leases.claim_shard(agents[index].id, GPU, ["cuda"], at(1), TTL)) is not None:
                leases.append(lease)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=claim_all, args=(i,)) for i in range(len(agents))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    second.dispose()
    assert errors == []
    assert sorted(lease.shard.id for lease in leases) == sorted(s.id for s in cluster_store.plans.shards_of(job.id))
    assert all(lease.attempt == 1 for lease in leases)
    assert all(s.state is ShardState.LEASED for s in cluster_store.plans.shards_of(job.id))


# -- reports -----------------------------------------------------------------------------


def test_reports_count_once_and_stale_attempts_store_nothing(cluster_store, store):
    job = planned_job(cluster_store, tasks=1, shards=1)
    agent = agent_of(cluster_store)
    lease = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)

    first = cluster_store.reports.report_records(lease.shard.id, 1, agent.id, records_of(lease, ["a", "b"]))
    assert (first.accepted, first.stored, first.duplicates) == (True, 2, 0)
    again = cluster_store.reports.report_records(lease.shard.id, 1, agent.id, records_of(lease, ["b", "c"]))
    assert (again.accepted, again.stored, again.duplicates) == (True, 1, 1)
    assert store.records.count_records() == 3
    assert all(r.job_id == job.id for r in store.records.all_records())
    assert cluster_store.plans.get_shard(lease.shard.id).trials_done == 4
    assert store.get_job(job.id).trials_done == 4

    for attempt, agent_id in [(2, agent.id), (0, agent.id), (1, "agent-other")]:
        stale = cluster_store.reports.report_records(lease.shard.id, attempt, agent_id, records_of(lease, ["x"]))
        assert not stale.accepted and stale.reason and stale.stored == 0
    assert cluster_store.reports.report_records("job-x.s0", 1, agent.id, []).accepted is False
    assert store.records.count_records() == 3 and store.get_job(job.id).trials_done == 4

    done = cluster_store.leases.complete_shard(lease.shard.id, 1, agent.id, at(5))
    assert done.accepted and done.shard.state is ShardState.DONE
    assert done.rollup.outcome is JobOutcome.READY_TO_BUILD
    assert store.get_job(job.id).status.startswith("tuning done: 1/1")
    late = cluster_store.reports.report_records(lease.shard.id, 1, agent.id, records_of(lease, ["late"]))
    assert not late.accepted and "over" in late.reason
    assert not cluster_store.leases.complete_shard(lease.shard.id, 1, agent.id, at(6)).accepted


def test_shards_warm_start_reports_are_kept_with_the_job_and_a_stale_one_adds_none(cluster_store, store):
    from dataclasses import replace

    from foundation.domain.job_spec import job_notes
    from foundation.domain.warm_start_use import WarmStartUse, job_warm_start

    job = planned_job(cluster_store, tasks=2, shards=2)
    agent = agent_of(cluster_store)
    first = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    second = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    used = WarmStartUse(seeds_offered=6, seeds_own_fingerprint=2, seeds_other_fingerprints=1, seeds_rejected=1,
                        seeds_failed=0, cost_model_sha256="ab" * 32, cost_model_note="")
    untrained = replace(used, seeds_own_fingerprint=0, cost_model_sha256="",
                        cost_model_note="the coordinator did not send cost model 3: NOT_FOUND")
    assert cluster_store.leases.complete_shard(first.shard.id, 1, agent.id, at(5), warm_start=used).accepted
    # A second report of the same shard (a stale or repeated attempt) is refused and adds nothing.
    assert not cluster_store.leases.complete_shard(first.shard.id, 1, agent.id, at(6), warm_start=untrained).accepted
    # Kept by shard, in the stored form the job's rows have always held.
    assert store.get_job(job.id).options["warm_start_used"] == {first.shard.id: {
        "seeds_offered": 6, "seeds_own_fingerprint": 2, "seeds_other_fingerprints": 1, "seeds_rejected": 1,
        "seeds_failed": 0, "cost_model_sha256": "ab" * 32, "cost_model_note": ""}}
    assert cluster_store.leases.complete_shard(second.shard.id, 1, agent.id, at(7), warm_start=untrained).accepted
    summed = job_warm_start(job_notes(store.get_job(job.id)).warm_start_used)
    assert summed == {"seeds_offered": 12, "seeds_own_fingerprint": 2, "seeds_other_fingerprints": 2,
                      "seeds_rejected": 2, "seeds_failed": 0, "pretrained_cost_model": False,
                      "cost_model_sha256": "ab" * 32, "cost_model_kind": "",
                      "cost_model_note": untrained.cost_model_note, "shards": 2}


def test_jobs_ready_to_build_are_those_the_rollup_calls_ready(cluster_store, store):
    # The tick asks SQL once for every running job whose shards are all done; the rule itself
    # lives in foundation.domain.shards.rollup, and both must say the same of every job.
    jobs = [planned_job(cluster_store, tasks=2, shards=2)]
    jobs += [planned_job(cluster_store, tasks=1, shards=1) for _ in range(2)]
    # Four shards; three leased and done leave exactly one job with a shard to tune.
    for _ in range(3):
        agent = agent_of(cluster_store)
        lease = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
        assert cluster_store.leases.complete_shard(lease.shard.id, lease.attempt, agent.id, at(2)).accepted
    by_rollup = sorted(
        j.id for j in jobs if cluster_store.plans.job_rollup(j.id).outcome is JobOutcome.READY_TO_BUILD
    )
    assert len(by_rollup) == 2
    assert cluster_store.plans.running_jobs_ready_to_build() == by_rollup


def test_a_group_of_reports_is_judged_report_by_report_in_one_transaction(cluster_store, store):
    job = planned_job(cluster_store, tasks=2, shards=2)
    one, two = agent_of(cluster_store), agent_of(cluster_store)
    first = cluster_store.leases.claim_shard(one.id, GPU, ["cuda"], at(1), TTL)
    second = cluster_store.leases.claim_shard(two.id, GPU, ["cuda"], at(1), TTL)
    progress = ("task_progress", {"task_name": "task0", "trials": 2})
    verdicts = cluster_store.reports.ingest_reports([
        ReportedBatch(first.shard.id, 1, one.id, records_of(first, ["a", "b"]), trials=3, events=[progress]),
        ReportedBatch(second.shard.id, 1, two.id, records_of(second, ["c"]), trials=1),
        ReportedBatch(first.shard.id, 1, one.id, records_of(first, ["b", "d"]), trials=2),  # "b" again
        ReportedBatch(second.shard.id, 2, two.id, records_of(second, ["stale"]), trials=5),  # no such attempt
        ReportedBatch(first.shard.id, 1, two.id, records_of(first, ["thief"]), trials=5),  # not its lease
        ReportedBatch("job-x.s9", 1, one.id, [], trials=1),
        ReportedBatch(second.shard.id, 1, two.id, records_of(second, ["e"], OTHER_GPU), trials=1),  # foreign
    ], now=at(2))
    assert [(v.accepted, v.stored, v.duplicates) for v in verdicts] == [
        (True, 2, 0), (True, 1, 0), (True, 1, 1), (False, 0, 0), (False, 0, 0), (False, 0, 0), (False, 0, 0),
    ]
    assert "attempt 2" in verdicts[3].reason and "not " + two.id in verdicts[4].reason
    assert "unknown" in verdicts[5].reason and OTHER_GPU in verdicts[6].reason
    assert sorted(r.trace for r in store.records.all_records()) == ['"a"', '"b"', '"c"', '"d"']
    assert cluster_store.plans.get_shard(first.shard.id).trials_done == 5
    assert cluster_store.plans.get_shard(second.shard.id).trials_done == 1
    assert store.get_job(job.id).trials_done == 6
    [event] = [e for e in cluster_store.events.events_after(job.id) if e.kind == "task_progress"]
    assert event.payload == {"task_name": "task0", "trials": 2} and event.created_at == at(2)


def test_a_lease_that_ends_while_a_groups_records_are_written_keeps_none_of_them(cluster_store, store, registry_url):
    # ingest_reports writes a group's records before it locks any job or shard, so that claims
    # and completions of the same jobs do not wait for the whole group; the leases are judged
    # again under the locks, and records of a lease that ended meanwhile are taken back.
    if not registry_url.startswith("postgresql"):
        pytest.skip("SQLite holds the whole database for the group's transaction: no lease can end meanwhile")
    job = planned_job(cluster_store, tasks=2, shards=2)
    one, two = agent_of(cluster_store), agent_of(cluster_store)
    first = cluster_store.leases.claim_shard(one.id, GPU, ["cuda"], at(1), TTL)
    second = cluster_store.leases.claim_shard(two.id, GPU, ["cuda"], at(1), TTL)
    write_kept = cluster_store.reports._insert_kept
    written = []

    def written_while_the_lease_ends(session, kept):
        result = write_kept(session, kept)
        written.append(sorted(index for index, _ in kept))
        if len(written) == 1:
            # Another writer of the job and the shard, in its own transaction, meanwhile.
            ending = threading.Thread(target=cluster_store.leases.fail_shard,
                                      args=(first.shard.id, 1, one.id, "gone", at(3)))
            ending.start()
            ending.join(timeout=15)
            assert not ending.is_alive(), "the failure waited for the group's locks"
        return result

    cluster_store.reports._insert_kept = written_while_the_lease_ends
    verdicts = cluster_store.reports.ingest_reports([
        ReportedBatch(first.shard.id, 1, one.id, records_of(first, ["a", "b"]), trials=2),
        ReportedBatch(second.shard.id, 1, two.id, records_of(second, ["c"]), trials=1),
    ], now=at(4))
    assert written == [[0, 1], [1]], "written for both, then again for the report that still stands"
    assert not verdicts[0].accepted and "attempt 1" in verdicts[0].reason, verdicts[0]
    assert (verdicts[1].accepted, verdicts[1].stored) == (True, 1)
    assert [r.trace for r in store.records.all_records()] == ['"c"']
    assert cluster_store.plans.get_shard(first.shard.id).trials_done == 0
    assert cluster_store.plans.get_shard(first.shard.id).state is ShardState.PENDING
    assert store.get_job(job.id).trials_done == 1


def test_silent_agent_loses_its_lease_and_the_next_attempt_keeps_its_records(cluster_store, store):
    planned_job(cluster_store, tasks=1, shards=1)
    silent, healthy = agent_of(cluster_store), agent_of(cluster_store)
    lease = cluster_store.leases.claim_shard(silent.id, GPU, ["cuda"], at(1), TTL)
    cluster_store.reports.report_records(lease.shard.id, 1, silent.id, records_of(lease, ["a", "b"]))

    cluster_store.agents.heartbeat(silent.id, at(20))
    assert cluster_store.leases.expire_leases(at(20 + TTL - 1), TTL) == []  # beat recently enough
    [expired] = cluster_store.leases.expire_leases(at(20 + TTL + 1), TTL)
    assert expired.state is ShardState.PENDING and expired.agent_id is None
    assert expired.failures[0].agent_id == silent.id and "heartbeat" in expired.failures[0].reason
    assert expired.failures[0].at == at(20 + TTL + 1)

    second = cluster_store.leases.claim_shard(healthy.id, GPU, ["cuda"], at(60), TTL)
    assert second.shard.id == lease.shard.id and second.attempt == 2
    assert store.records.count_records() == 2  # what attempt 1 reported is kept
    assert not cluster_store.reports.report_records(lease.shard.id, 1, silent.id, records_of(lease, ["z"])).accepted
    retry = cluster_store.reports.report_records(second.shard.id, 2, healthy.id, records_of(lease, ["a", "d"]))
    assert (retry.stored, retry.duplicates) == (1, 1)


def test_used_up_attempts_fail_the_shard_and_the_job(cluster_store, store):
    job = planned_job(cluster_store, tasks=2, shards=2)
    agent = agent_of(cluster_store)
    first = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    other = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    change = cluster_store.leases.fail_shard(first.shard.id, 1, agent.id, "out of memory", at(2), max_attempts=2)
    assert change.accepted and change.shard.state is ShardState.PENDING
    assert not cluster_store.leases.fail_shard(first.shard.id, 1, agent.id, "again", at(2), max_attempts=2).accepted

    retry = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(3), TTL)
    assert retry.shard.id == first.shard.id and retry.attempt == 2
    # The second attempt's agent goes silent: a lapsed lease is a failed attempt too.
    [failed] = [s for s in cluster_store.leases.expire_leases(at(3 + TTL + 1), TTL, max_attempts=2)
                if s.id == first.shard.id]
    assert failed.state is ShardState.FAILED
    assert [f.reason for f in failed.failures][0] == "out of memory"

    rollup = cluster_store.plans.job_rollup(job.id)
    assert rollup.outcome is JobOutcome.FAILED and first.shard.id in rollup.error
    assert "out of memory" in rollup.error
    final = store.get_job(job.id)
    assert final.state == "failed" and first.shard.id in final.error and final.finished_at
    assert cluster_store.plans.get_shard(other.shard.id).state is ShardState.CANCELLED


def test_lost_leases_found_by_heartbeat_are_requeued(cluster_store):
    planned_job(cluster_store, tasks=2, shards=2)
    agent = agent_of(cluster_store)
    kept = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    lost = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    verdict = cluster_store.leases.reconcile_leases(
        agent.id, [(kept.shard.id, 1), (kept.shard.id, 0), ("job-x.s9", 1)], at(10), grace=5
    )
    assert [shard.id for shard in verdict.lost] == [lost.shard.id]
    assert {(c[0], c[1]) for c in verdict.cancel} == {(kept.shard.id, 0), ("job-x.s9", 1)}
    assert cluster_store.plans.get_shard(lost.shard.id).state is ShardState.PENDING
    assert cluster_store.plans.get_shard(kept.shard.id).state is ShardState.LEASED


def test_a_late_handled_heartbeat_does_not_lose_newer_leases(cluster_store):
    """An overloaded coordinator may handle a heartbeat long after the agent sent it; a lease
    granted after the agent took its list is not lost (seen at 1,000 agents in the scale bench)."""
    planned_job(cluster_store, tasks=1, shards=1)
    agent = agent_of(cluster_store)
    lease = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(5), TTL)
    verdict = cluster_store.leases.reconcile_leases(agent.id, [], at(30), grace=5, as_of=at(4))
    assert verdict.lost == () and verdict.cancel == ()
    assert cluster_store.plans.get_shard(lease.shard.id).state is ShardState.LEASED


def test_cancel_revokes_leases_and_ends_the_job(cluster_store, store):
    job = planned_job(cluster_store, tasks=2, shards=2)
    agent = agent_of(cluster_store)
    lease = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    cancelled = cluster_store.plans.cancel_job(job.id, at(2), "changed my mind")
    assert cancelled.state == "cancelled" and cancelled.error == "changed my mind"
    assert {s.state for s in cluster_store.plans.shards_of(job.id)} == {ShardState.CANCELLED}
    assert cluster_store.plans.job_rollup(job.id).outcome is JobOutcome.CANCELLED
    assert not cluster_store.reports.report_records(lease.shard.id, 1, agent.id, records_of(lease, ["a"])).accepted
    assert cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(3), TTL) is None
    assert cluster_store.plans.cancel_job(job.id, at(4)).finished_at == at(2)  # already over: unchanged


def test_a_job_moves_only_from_the_state_it_is_expected_in(cluster_store, store):
    job = planned_job(cluster_store, tasks=1, shards=1)
    assert cluster_store.jobs.move_job(job.id, JobState.BUILDING, JobState.FAILED, at(1), status="late") is None
    with pytest.raises(IllegalTransition):
        cluster_store.jobs.move_job(job.id, JobState.RUNNING, JobState.SUCCEEDED, at(1), status="too soon")
    moved = cluster_store.jobs.move_job(job.id, JobState.RUNNING, JobState.BUILDING, at(2), status="building",
                                        trials_budget=99)
    assert moved.state == "building" and moved.status == "building" and moved.trials_budget == 99
    assert store.get_job(job.id).trials_budget == 99
    failed = cluster_store.jobs.move_job(job.id, JobState.BUILDING, JobState.FAILED, at(3), status="failed: build",
                                         error="no compiler")
    assert failed.error == "no compiler" and failed.finished_at == at(3)
    moves = [e.payload for e in cluster_store.events.events_after(job.id) if e.kind == "state_changed"][-2:]
    assert moves == [
        {"from": "running", "to": "building", "status": "building", "error": ""},
        {"from": "building", "to": "failed", "status": "failed: build", "error": "no compiler"},
    ]


# -- events, attaching, binding ----------------------------------------------------------


def test_events_resume_after_a_sequence(cluster_store):
    job = planned_job(cluster_store, tasks=1, shards=1)
    events = cluster_store.events.events_after(job.id)
    assert [e.kind for e in events] == ["state_changed", "state_changed"]
    assert events[1].payload["to"] == "running"
    seen = events[-1].sequence
    agent = agent_of(cluster_store)
    cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    seq = cluster_store.events.append_event(job.id, "log", {"message": "hello"}, at(2))
    resumed = cluster_store.events.events_after(job.id, after_sequence=seen)
    assert [e.kind for e in resumed] == ["shard_changed", "log"]
    assert resumed[0].payload["state"] == "leased" and resumed[-1].sequence == seq
    assert cluster_store.events.last_event_sequence(job.id) == seq
    assert cluster_store.events.events_after(job.id, after_sequence=seq) == []
    assert len(cluster_store.events.events_after(job.id, limit=1)) == 1


def test_a_submit_attaches_to_the_unfinished_job(cluster_store):
    job = planned_job(cluster_store, tasks=1, shards=1)
    assert cluster_store.jobs.attachable_job("model-1", CUDA_TARGET, GPU, PLAIN).id == job.id
    assert cluster_store.jobs.attachable_job("model-1", CUDA_TARGET, OTHER_GPU, PLAIN) is None
    assert cluster_store.jobs.attachable_job("model-1", '{"kind":"llvm"}', GPU, PLAIN) is None
    # A job tuning the other form of weights is other work: a submit of one never attaches to the other.
    assert cluster_store.jobs.attachable_job("model-1", CUDA_TARGET, GPU, PREPACKED) is None
    cluster_store.plans.cancel_job(job.id, at(1))
    assert cluster_store.jobs.attachable_job("model-1", CUDA_TARGET, GPU, PLAIN) is None


def test_a_submit_attaches_only_to_a_job_of_its_form_of_weights(cluster_store):
    made = {}
    for layout in (PLAIN, PREPACKED):
        made[layout], _ = cluster_store.jobs.create_job(
            model_id="model-1", target_request="llvm", target_kind="llvm", target="",
            fingerprint_id=None, trials_budget=8, options={"weights_layout": layout.value}, now=T0,
            status="waiting", parent_request=None,
        )
    assert cluster_store.jobs.attachable_job("model-1", "llvm", None, PLAIN).id == made[PLAIN].id
    assert cluster_store.jobs.attachable_job("model-1", "llvm", None, PREPACKED).id == made[PREPACKED].id


def test_a_queued_job_waits_for_its_fingerprint_then_is_bound(cluster_store, store):
    waiting, _ = cluster_store.jobs.create_job(
        model_id="model-1", target_request="vulkan", target_kind="vulkan", target="",
        fingerprint_id=None, trials_budget=8, options={}, now=T0,
        status="waiting for an agent with target kind vulkan", parent_request="req-1",
    )
    assert waiting.fingerprint_id is None and waiting.parent_request == "req-1"
    assert cluster_store.jobs.attachable_job("model-1", "vulkan", None, PLAIN).id == waiting.id
    assert [j.id for j in cluster_store.jobs.queued_jobs_without_fingerprint("vulkan")] == [waiting.id]
    with pytest.raises(Exception, match="no fingerprint"):
        cluster_store.plans.add_job_plan(waiting.id, [], [], T0)

    agent = agent_of(cluster_store, kinds=["vulkan"])
    assert list(cluster_store.agents.agents_matching("vulkan")) == [agent.fingerprint_id]
    bound = cluster_store.jobs.bind_job_fingerprint(waiting.id, GPU, '{"kind":"vulkan"}', at(1), "planning")
    assert bound.fingerprint_id == GPU and bound.target == '{"kind":"vulkan"}' and bound.state == "queued"
    assert cluster_store.jobs.bind_job_fingerprint(waiting.id, OTHER_GPU, "{}", at(2)) is None  # bound already
    assert cluster_store.jobs.queued_jobs_without_fingerprint("vulkan") == []
    assert store.get_job(waiting.id).fingerprint_id == GPU


# -- validations -------------------------------------------------------------------------


def test_validation_lease_round_trip(cluster_store, store):
    job, agent = validating_job(cluster_store, store)
    cluster_store.validations.create_validation(
        job.id, library=b"\x7fELF lib", lib_format="so", reference_library=b"untuned",
        inputs=[{"name": "x", "dtype": "float32", "shape": [1, 4]}], weights=[], seed=7,
        runs=5, warmup=1, now=at(3),
    )
    stranger = agent_of(cluster_store, fingerprint_id=OTHER_GPU)
    assert cluster_store.validations.claim_validation(stranger.id, OTHER_GPU, at(4)) is None
    first = cluster_store.validations.claim_validation(agent.id, GPU, at(4))
    assert first.library == b"\x7fELF lib" and first.reference_library == b"untuned" and first.attempt == 1
    assert cluster_store.validations.validation_library(job.id) == b"\x7fELF lib"
    assert cluster_store.validations.validation_library("job-none") is None
    assert cluster_store.validations.claim_validation(agent.id, GPU, at(4)) is None
    failed = cluster_store.validations.fail_validation(job.id, 1, agent.id, "device busy", at(5))
    assert failed.validation.state == "pending"
    second = cluster_store.validations.claim_validation(agent.id, GPU, at(6))
    assert second.attempt == 2
    assert not cluster_store.validations.finish_validation(job.id, 1, agent.id, {"passed": True}, at(7)).accepted
    done = cluster_store.validations.finish_validation(job.id, 2, agent.id, {"passed": True}, at(7))
    assert done.accepted and done.validation.state == "done" and done.validation.result == {"passed": True}
    assert [f.reason for f in done.validation.failures] == ["device busy"]


def built(cluster_store, store):  # type: ignore[no-untyped-def]
    """A validating job whose library waits for an agent; returns (job, the agent that tuned it)."""
    job, agent = validating_job(cluster_store, store)
    cluster_store.validations.create_validation(job.id, library=b"lib", lib_format="so", reference_library=None,
                                                inputs=[], weights=[], seed=0, runs=1, warmup=0, now=at(3))
    return job, agent


def test_a_silent_agents_validation_is_retried_and_fails_after_max_attempts(cluster_store, store):
    job, agent = built(cluster_store, store)
    other = agent_of(cluster_store)
    assert cluster_store.validations.claim_validation(agent.id, GPU, at(4)).attempt == 1
    cluster_store.agents.heartbeat(agent.id, at(20))
    # beat recently enough:
    assert cluster_store.validations.expire_validations(at(20 + TTL - 1), TTL, max_attempts=2) == []
    [retry] = cluster_store.validations.expire_validations(at(20 + TTL + 1), TTL, max_attempts=2)
    assert (retry.state, retry.agent_id, retry.leased_at) == ("pending", None, None)
    [failure] = retry.failures
    assert (failure.attempt, failure.agent_id, failure.at) == (1, agent.id, at(20 + TTL + 1))
    assert failure.reason == f"agent {agent.id} sent no heartbeat for over 30s (lease TTL)"
    # The silent agent's late report changes nothing; the next attempt is another agent's.
    assert not cluster_store.validations.finish_validation(job.id, 1, agent.id, {"passed": True}, at(60)).accepted
    second = cluster_store.validations.claim_validation(other.id, GPU, at(60))
    assert (second.attempt, second.validation.agent_id) == (2, other.id)
    [failed] = cluster_store.validations.expire_validations(at(200), TTL, max_attempts=2)
    assert (failed.state, failed.agent_id, failed.leased_at) == ("failed", other.id, at(60))
    assert [f.attempt for f in failed.failures] == [1, 2]
    assert cluster_store.validations.claim_validation(agent.id, GPU, at(201)) is None
    assert cluster_store.validations.get_validation(job.id).state == "failed"


def test_cancelling_a_job_cancels_its_validation_lease(cluster_store, store):
    job, agent = built(cluster_store, store)
    cluster_store.validations.claim_validation(agent.id, GPU, at(4))
    cluster_store.plans.cancel_job(job.id, at(5), "changed my mind")
    assert cluster_store.validations.get_validation(job.id).state == "cancelled"
    late = cluster_store.validations.finish_validation(job.id, 1, agent.id, {"passed": True}, at(6))
    assert not late.accepted and "is over: it is cancelled" in late.reason


# -- schema upgrade ----------------------------------------------------------------------


def test_a_registry_made_at_0001_upgrades_with_its_jobs(registry_url):
    # The farm's own engine: on SQLite it turns foreign keys on, as the upgrade will run.
    engine = create_registry_engine(parse_registry_url(registry_url))
    with engine.begin() as connection:
        command.upgrade(migrate.alembic_config(connection), "0001")
        connection.execute(text(
            "INSERT INTO fingerprints (id, kind, summary, details, created_at) "
            "VALUES ('cpu-1', 'cpu', 'a cpu', '{}', '2026-01-01 00:00:00')"))
        connection.execute(text(
            "INSERT INTO models (id, name, source, source_digest, batch, inputs, weights, "
            "num_parameters, created_at) VALUES ('m-1', 'mlp', 'zoo', 'v1', 1, '[]', '[]', 1, "
            "'2026-01-01 00:00:00')"))
        connection.execute(text(
            "INSERT INTO jobs (id, model_id, target, fingerprint_id, state, cache_hit, "
            "trials_budget, trials_done, options, created_at) VALUES ('job-old', 'm-1', "
            "'{\"kind\":\"llvm\",\"mcpu\":\"znver3\"}', 'cpu-1', 'succeeded', false, 8, 8, '{}', "
            "'2026-01-01 00:00:00')"))
        # An artifact points at the job: SQLite's copy of `jobs` must not trip its foreign key.
        connection.execute(text(
            "INSERT INTO artifacts (id, model_id, target, fingerprint_id, job_id, library, sha256, "
            "size, lib_format, latency_mean_ms, latency_median_ms, latency_std_ms, validation, "
            "validation_passed, tvm_version, software, created_at) VALUES ('art-1', 'm-1', 'llvm', "
            "'cpu-1', 'job-old', :lib, 'x', 3, 'so', 1, 1, 0, '{}', true, '0.27.0', '{}', "
            "'2026-01-01 00:00:00')"), {"lib": b"lib"})
    engine.dispose()

    assert upgrade_registry(registry_url) == migrate.head_revision()
    registry = RegistryStore(registry_url)
    try:
        job = registry.get_job("job-old")
        assert job.fingerprint_id == "cpu-1" and job.state == "succeeded" and job.trials_done == 8
        assert job.target_kind == "llvm" and job.target_request == job.target and job.status == ""
        assert registry.get_artifact("art-1").job_id == "job-old"
        # A job created the pre-cluster way still works.
        fresh = registry.create_job(model_id="m-1", target='{"kind":"llvm"}', fingerprint_id="cpu-1",
                                    trials_budget=4, options={})
        assert fresh.target_kind == "llvm" and fresh.parent_request is None
    finally:
        registry.dispose()


def test_callers_reach_each_aggregate_through_its_store(cluster_store):
    """ClusterStore passed 41 of its stores' calls through as its own: now one way to each call."""
    assert [name for name, value in vars(cluster_store).items() if callable(value)] == []
    assert {"agents", "events", "jobs", "plans", "leases", "reports", "validations"} <= set(vars(cluster_store))


def test_a_job_made_to_attach_joins_the_unfinished_equal_one(cluster_store):
    asked = dict(model_id="model-1", target_request="cuda", target_kind="cuda", target=CUDA_TARGET,
                 fingerprint_id=GPU, options={"weights_layout": PLAIN.value}, now=T0)
    first, attached = cluster_store.jobs.create_job(**asked, attach_in=PLAIN)
    assert not attached
    again, attached = cluster_store.jobs.create_job(**asked, attach_in=PLAIN)
    assert attached and again.id == first.id
    apart, attached = cluster_store.jobs.create_job(**asked)  # a job with a goal of its own joins none
    assert not attached and apart.id != first.id
    assert [e.payload["to"] for e in cluster_store.events.events_after(apart.id)] == ["queued"]
