"""What the coordinator keeps in memory to stay fast, checked against the registry it caches:
live agents (heartbeats written back, settled lease lists, pending work), the group commit of
reports, and which progress reports become events. On SQLite and PostgreSQL."""

from __future__ import annotations

import gc
import threading

import pytest

from coordinator.cluster_store import ClusterStore
from coordinator.fleet.group_commit import GroupCommit
from coordinator.fleet.live_agents import LiveAgents
from coordinator.fleet.progress_events import ProgressEvents
from foundation.errors import RegistryError
from foundation.registry.entities import NewRecord, ReportedBatch
from foundation.registry.session import Changes

from support.cluster_rows import GPU, OTHER_GPU, TTL, agent_of, at, planned_job, records_of, validating_job
from support.polling import wait_for


def _live(cluster_store: ClusterStore, store) -> LiveAgents:  # type: ignore[no-untyped-def]
    # As coordinator.service builds it, but pending_refresh=0: every state change is seen at
    # once (the coordinator allows 0.25 s).
    unit = store.unit_of_work
    return LiveAgents(cluster_store, lambda: unit.state_version, unit.lease_version, pending_refresh=0)


def test_heartbeats_are_written_back_in_one_flush(cluster_store, store):
    live = _live(cluster_store, store)
    agents = [agent_of(cluster_store), agent_of(cluster_store)]
    assert live.known("agent-nobody") is None
    assert live.known(agents[0].id).fingerprint_id == GPU  # registered before: read from the registry
    live.beat(agents[0].id, at(40))
    live.beat(agents[1].id, at(41))
    live.beat(agents[1].id, at(42))  # the latest counts
    assert cluster_store.agents.get_agent(agents[1].id).last_heartbeat_at == at(0)  # not written yet
    assert live.flush() == 2
    assert [cluster_store.agents.get_agent(a.id).last_heartbeat_at for a in agents] == [at(40), at(42)]
    assert live.flush() == 0

    # A lost agent that beats again is active again once the beat is written.
    assert {a.id for a in cluster_store.agents.mark_lost_agents(at(42 + TTL + 1), TTL)} == {a.id for a in agents}
    live.beat(agents[0].id, at(80))
    live.flush()
    assert cluster_store.agents.get_agent(agents[0].id).state == "active"
    assert cluster_store.agents.get_agent(agents[1].id).state == "lost"
    # A beat of an agent the registry does not know is written nowhere, and said so.
    assert cluster_store.agents.record_heartbeats({agents[1].id: at(81), "agent-nobody": at(81)}) == {agents[1].id}
    assert cluster_store.agents.get_agent(agents[1].id).last_heartbeat_at == at(81)
    assert cluster_store.agents.get_agent(agents[1].id).state == "active"
    assert cluster_store.agents.get_agent("agent-nobody") is None


def test_a_settled_lease_list_stays_settled_only_until_a_shard_changes(cluster_store, store):
    live = _live(cluster_store, store)
    planned_job(cluster_store, tasks=2, shards=2)
    agent = agent_of(cluster_store)
    lease = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    listed = frozenset({(lease.shard.id, lease.attempt)})

    version = live.lease_version(agent.id)
    verdict = cluster_store.leases.reconcile_leases(agent.id, sorted(listed), at(2), grace=10)
    assert verdict.settled and not verdict.cancel and not verdict.lost
    live.note_settled(agent.id, listed, version)
    assert live.is_settled(agent.id, listed, live.lease_version(agent.id))
    assert not live.is_settled(agent.id, frozenset(), live.lease_version(agent.id)), "another list is another question"

    # Records change no shard's state: the verdict holds.
    assert cluster_store.reports.report_records(lease.shard.id, 1, agent.id, records_of(lease, ["a"])).accepted
    assert live.is_settled(agent.id, listed, live.lease_version(agent.id))
    # A shard state change (here: the other shard leased) is a reason to look again.
    cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(3), TTL)
    assert not live.is_settled(agent.id, listed, live.lease_version(agent.id))
    verdict = cluster_store.leases.reconcile_leases(agent.id, sorted(listed), at(4), grace=10)
    assert not verdict.settled and not verdict.lost  # the new lease is within its grace


def test_only_changes_to_an_agents_own_leases_unsettle_its_list(cluster_store, store):
    # A fleet leases and completes shards every few seconds: if each of those unsettled every
    # agent's list, no heartbeat would be answered from memory. A change that may end this
    # agent's lease (here: the job cancelled, or failed by another agent's shard) still does.
    live = _live(cluster_store, store)
    for ending in ("cancel", "another shard fails"):
        job = planned_job(cluster_store, tasks=3, shards=3)
        mine, other = agent_of(cluster_store), agent_of(cluster_store)
        lease = cluster_store.leases.claim_shard(mine.id, GPU, ["cuda"], at(1), TTL)
        listed = frozenset({(lease.shard.id, lease.attempt)})
        version = live.lease_version(mine.id)
        assert cluster_store.leases.reconcile_leases(mine.id, sorted(listed), at(2), grace=10).settled
        live.note_settled(mine.id, listed, version)

        theirs = cluster_store.leases.claim_shard(other.id, GPU, ["cuda"], at(3), TTL)
        assert cluster_store.leases.complete_shard(theirs.shard.id, theirs.attempt, other.id, at(4)).accepted
        assert live.is_settled(mine.id, listed, live.lease_version(mine.id)), \
            "another agent's claim or completion unsettled this one"
        assert cluster_store.leases.reconcile_leases(mine.id, sorted(listed), at(5), grace=10).settled

        if ending == "cancel":
            cluster_store.plans.cancel_job(job.id, at(6))
        else:
            theirs = cluster_store.leases.claim_shard(other.id, GPU, ["cuda"], at(6), TTL)
            assert cluster_store.leases.fail_shard(theirs.shard.id, theirs.attempt, other.id, "broken", at(7),
                                                   max_attempts=1).accepted
        assert not live.is_settled(mine.id, listed, live.lease_version(mine.id)), f"{ending}: still settled"
        verdict = cluster_store.leases.reconcile_leases(mine.id, sorted(listed), at(8), grace=10)
        assert [shard_id for shard_id, _, _ in verdict.cancel] == [lease.shard.id], ending


def test_a_unit_that_may_end_any_lease_moves_every_agents_lease_version(store):
    # A completion says whose lease it changed; were the job to fail in the same unit and its
    # other shards be cancelled, every agent must look again.
    unit = store.unit_of_work
    a, b = unit.lease_version("agent-a"), unit.lease_version("agent-b")
    with unit.write(Changes.LEASES) as session:
        session.changed_leases_of(["agent-a"])
    assert unit.lease_version("agent-a") != a and unit.lease_version("agent-b") == b
    a = unit.lease_version("agent-a")
    # A unit that said it changes no state cannot change a lease: it is refused, and rolled back.
    with pytest.raises(ValueError, match="cannot change shard leases"):
        with unit.write(Changes.NO_STATE) as session:
            session.changed_leases_of(["agent-a"])
    assert unit.lease_version("agent-a") == a, "a quiet unit changed a lease version"
    with unit.write(Changes.LEASES) as session:
        session.changed_leases_of(["agent-a"])
        session.may_have_changed_any_lease()
    assert unit.lease_version("agent-b") != b


def test_what_a_write_unit_declares_is_what_moves(store):
    # foundation.registry.session: a unit that changes no state moves no version; one that may
    # change any state moves them all; one that changes leases and names none changed nothing.
    unit = store.unit_of_work
    state, a = unit.state_version, unit.lease_version("agent-a")
    with unit.write(Changes.NO_STATE):
        pass
    with unit.write(Changes.LEASES):
        pass
    assert (unit.state_version, unit.lease_version("agent-a")) == (state, a)
    with unit.write(Changes.STATE) as session:
        session.changed_leases_of(["agent-b"])  # already said: every agent's
    assert unit.state_version == state + 1 and unit.lease_version("agent-a") != a


def test_lease_lists_settled_together_are_re_read_at_spread_out_times(cluster_store, store, monkeypatch):
    # A fleet that leased a job's shards together settles together; re-reading all their
    # lists at one beat put the registry in front of every heartbeat of that beat.
    from coordinator.fleet import live_agents

    clock = [1000.0]
    monkeypatch.setattr(live_agents.time, "monotonic", lambda: clock[0])
    live = _live(cluster_store, store)
    listed = frozenset({("job-x/shard-0", 1)})
    version = live.version()
    agents = [f"agent-{i}" for i in range(100)]
    for agent_id in agents:
        live.note_settled(agent_id, listed, version)

    def settled() -> int:
        return sum(live.is_settled(a, listed, version) for a in agents)

    age = live_agents.MAX_SETTLED_AGE_S
    clock[0] += age / 2 - 0.01
    assert settled() == 100, "a settled list was re-read before half the bound"
    clock[0] += age / 4
    assert 0 < settled() < 100, "the lists settled together expire together"
    clock[0] += age / 4 + 0.02
    assert settled() == 0, "a settled list outlived the bound"


def test_idle_polls_see_pending_work_as_soon_as_it_exists_and_until_it_is_gone(cluster_store, store):
    live = _live(cluster_store, store)
    agent = agent_of(cluster_store)
    assert not live.may_have_work(GPU, ["cuda"])
    planned_job(cluster_store, tasks=2, shards=2)
    assert live.may_have_work(GPU, ["cuda"]) and not live.may_have_work(GPU, ["llvm"])
    assert not live.may_have_work(OTHER_GPU, ["cuda"])
    cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    assert live.may_have_work(GPU, ["cuda"])
    cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    assert not live.may_have_work(GPU, ["cuda"])



def test_idle_polls_see_a_pending_validation_until_it_is_leased(cluster_store, store):
    # Every idle agent asks for a validation before each shard poll: answered from this.
    live = _live(cluster_store, store)
    job, agent = validating_job(cluster_store, store)
    assert not live.may_have_work(GPU, ["cuda"], work="validation"), "validating, but nothing built yet"
    cluster_store.validations.create_validation(job.id, library=b"lib", lib_format="so", reference_library=None,
                                                inputs=[], weights=[], seed=1, runs=1, warmup=0, now=at(3))
    assert live.may_have_work(GPU, ["cuda"], work="validation")
    assert not live.may_have_work(GPU, ["llvm"], work="validation")
    assert not live.may_have_work(OTHER_GPU, ["cuda"], work="validation")
    assert not live.may_have_work(GPU, ["cuda"]), "a validation is not a shard"
    assert cluster_store.validations.claim_validation(agent.id, GPU, at(4)) is not None
    assert not live.may_have_work(GPU, ["cuda"], work="validation")


class _HeldCluster:
    """A ClusterStore whose first group commit waits until the test lets it go."""

    def __init__(self, cluster_store: ClusterStore):
        self._cluster = cluster_store
        self.release = threading.Event()
        self.entered = threading.Event()
        self.groups: list[int] = []

    def ingest_reports(self, batches):  # type: ignore[no-untyped-def]
        if not self.groups:
            self.entered.set()
            self.release.wait(30)
        self.groups.append(len(batches))
        return self._cluster.reports.ingest_reports(batches)


def test_reports_that_arrive_during_a_commit_go_in_the_next_one(cluster_store, store):
    job = planned_job(cluster_store, tasks=2, shards=2)
    agents = [agent_of(cluster_store), agent_of(cluster_store)]
    leases = [cluster_store.leases.claim_shard(a.id, GPU, ["cuda"], at(1), TTL) for a in agents]
    held = _HeldCluster(cluster_store)
    ingest = GroupCommit("test-reports", held.ingest_reports)
    answers: dict[int, object] = {}

    def report(n: int) -> None:
        agent, lease = agents[n % 2], leases[n % 2]
        # Traces overlap between reports: each is stored once, for whichever report is first.
        batch = ReportedBatch(lease.shard.id, 1, agent.id, records_of(lease, [f"t{n % 7}", f"t{n}"]), trials=2)
        answers[n] = ingest.submit(batch)

    threads = [threading.Thread(target=report, args=(0,))]
    threads[0].start()
    assert held.entered.wait(30)
    threads += [threading.Thread(target=report, args=(n,)) for n in range(1, 21)]
    for thread in threads[1:]:
        thread.start()
    wait_for(lambda: ingest.waiting() == 20, 30, "20 reports queued behind the held commit", interval=0.01)
    held.release.set()
    for thread in threads:
        thread.join(30)
    ingest.close()

    assert held.groups == [1, 20]
    assert all(answer.accepted for answer in answers.values())
    # Each agent's shard has its own workload: a trace is one record per workload.
    unique = {(n % 2, trace) for n in range(21) for trace in (f"t{n % 7}", f"t{n}")}
    assert len(unique) == 28
    assert sum(answer.stored for answer in answers.values()) == store.records.count_records() == len(unique)
    assert sum(answer.duplicates for answer in answers.values()) == 42 - len(unique)
    assert store.get_job(job.id).trials_done == 42


def test_a_report_that_cannot_be_written_fails_alone(cluster_store, store):
    planned_job(cluster_store, tasks=1, shards=1)
    agent = agent_of(cluster_store)
    lease = cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    held = _HeldCluster(cluster_store)
    ingest = GroupCommit("test-reports", held.ingest_reports)
    bad = NewRecord(workload_id=999_999, fingerprint_id=GPU, target=lease.job.target, tvm_version="0.27.0",
                    trace='"x"', run_secs=[0.001])
    results: dict[str, object] = {}

    def report(name: str, records) -> None:  # type: ignore[no-untyped-def]
        try:
            results[name] = ingest.submit(ReportedBatch(lease.shard.id, 1, agent.id, records, trials=1))
        except RegistryError as err:
            results[name] = err

    first = threading.Thread(target=report, args=("first", records_of(lease, ["a"])))
    first.start()
    assert held.entered.wait(30)
    rest = [threading.Thread(target=report, args=("bad", [bad])),
            threading.Thread(target=report, args=("good", records_of(lease, ["b"])))]
    for thread in rest:
        thread.start()
    wait_for(lambda: ingest.waiting() == 2, 30, "2 reports queued behind the held commit", interval=0.01)
    held.release.set()
    for thread in [first, *rest]:
        thread.join(30)
    ingest.close()

    assert isinstance(results["bad"], RegistryError) and "999999" in str(results["bad"])
    assert results["first"].stored == 1 and results["good"].stored == 1
    assert store.records.count_records() == 2


def test_progress_events_are_thinned_but_the_last_word_is_kept():
    events = ProgressEvents(interval=3600)
    item = {"task_name": "t0", "trials": 1, "budget": 8}
    assert events.due("s1", [item]) == [item]  # the first report of a task
    assert events.due("s1", [dict(item, trials=2)]) == []
    assert events.due("s1", [dict(item, trials=3), {"task_name": "t1", "trials": 1, "budget": 8}]) == [
        {"task_name": "t1", "trials": 1, "budget": 8}]
    done = dict(item, trials=8)
    assert events.due("s2", [{"task_name": "t0", "trials": 1, "budget": 8}])  # another shard, its own clock
    assert events.held_back("s1") == [dict(item, trials=3)]
    assert events.held_back("s1") == []
    assert events.due("s1", [done]) == [done], "a finished task is always written"


def test_what_a_plan_or_build_leaves_behind_is_kept_out_of_the_garbage_collector():
    # A full collection walks every tracked object with the GIL held; the models and TVM
    # objects a plan leaves behind made those walks the slowest heartbeats (coordinator.heap).
    from coordinator.background_worker import BackgroundWorker

    gc.unfreeze()
    kept: list[dict] = []
    after = threading.Event()
    worker = BackgroundWorker("test-planner")
    try:
        worker.submit("plan", lambda: kept.extend({"n": n} for n in range(20_000)))
        worker.submit("next", after.set)  # steps run in order, each followed by the freeze
        assert after.wait(30)
        assert gc.get_freeze_count() >= len(kept) == 20_000
    finally:
        worker.stop()
        gc.unfreeze()


def test_on_the_event_loop_pending_work_is_refreshed_in_the_background(cluster_store, store):
    # The server's event loop must not wait on the registry: there, a stale answer is used
    # while a thread reads the new one, and with no answer yet the claim is tried.
    live = _live(cluster_store, store)
    agent = agent_of(cluster_store)
    assert live.may_have_work(GPU, ["cuda"], wait=False), "nothing read yet: worth a claim"
    wait_for(lambda: not live.may_have_work(GPU, ["cuda"], wait=False), 10, "the first read to land", 0.05)
    planned_job(cluster_store, tasks=1, shards=1)
    assert not live.may_have_work(GPU, ["cuda"], wait=False), "the last answer, while the new one is read"
    wait_for(lambda: live.may_have_work(GPU, ["cuda"], wait=False), 10, "the new job's shard to be seen", 0.05)
    cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    wait_for(lambda: not live.may_have_work(GPU, ["cuda"], wait=False), 10, "the leased shard to be gone", 0.05)
