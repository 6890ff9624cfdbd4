"""Shards and leases (pure): splitting, attempt ids, stale reports, TTL expiry, failure, rollup."""

import itertools
import random

import pytest

from foundation.domain.job_rollup import JobOutcome, rollup
from foundation.domain.leases import StaleAttempt, judges_silence
from foundation.domain.shard_leases import (
    accept_report,
    cancel_unfinished,
    complete,
    expire,
    fail_attempt,
    lease,
    next_pending,
    reconcile_heartbeat,
    stale_reason,
    trials_left,
)
from foundation.domain.shard_split import TaskCost, estimated_cost, split_tasks
from foundation.domain.shards import IllegalShardTransition, ShardState, allowed_sources, check_transition
from foundation.domain.transitions import IllegalTransition

TTL = 30.0


def tasks_with_costs(costs):
    """Tasks named t0, t1, ... whose flop is their cost, for use with ``cost=by_flop``."""
    return [TaskCost(name=f"t{i}", weight=1, flop=float(c)) for i, c in enumerate(costs)]


def by_flop(task):
    return task.flop


def one_shard(job_id="j1", names=("a", "b")):
    (shard,) = split_tasks(job_id, [TaskCost(n, 1, 1e9) for n in names], matching_agents=1, total_trials=64)
    return shard


# --- splitting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("num_tasks,agents", [(1, 1), (5, 2), (12, 3), (40, 7), (3, 10), (9, 0)])
def test_split_puts_every_task_in_exactly_one_nonempty_shard(num_tasks, agents):
    rng = random.Random(num_tasks * 31 + agents)
    tasks = [TaskCost(f"fused_op_{i}", rng.randint(1, 12), rng.uniform(1e6, 5e10)) for i in range(num_tasks)]
    shards = split_tasks("j1", tasks, matching_agents=agents, total_trials=1000)
    placed = [name for shard in shards for name in shard.task_names]
    assert sorted(placed) == sorted(t.name for t in tasks)
    assert len(placed) == len(set(placed))
    assert all(shard.task_names for shard in shards)
    assert len(shards) == min(num_tasks, max(agents, 1))
    assert len({shard.id for shard in shards}) == len(shards)
    assert all(shard.state is ShardState.PENDING and shard.attempt == 0 for shard in shards)


def test_split_is_deterministic_whatever_the_input_order():
    tasks = tasks_with_costs([5, 3, 3, 8, 1, 2, 2, 7])
    first = split_tasks("j1", tasks, 3, 800, cost=by_flop)
    again = split_tasks("j1", tasks, 3, 800, cost=by_flop)
    shuffled = split_tasks("j1", random.Random(4).sample(tasks, len(tasks)), 3, 800, cost=by_flop)
    assert first == again
    assert [set(s.task_names) for s in first] == [set(s.task_names) for s in shuffled]


def test_split_balances_by_cost():
    shards = split_tasks("j1", tasks_with_costs([4, 3, 3, 2]), 2, 100, cost=by_flop)
    assert sorted(shard.cost for shard in shards) == [6.0, 6.0]
    # The costliest task does not land with the second costliest.
    assert not any({"t0", "t1"} <= set(shard.task_names) for shard in shards)


@pytest.mark.parametrize("seed", range(5))
def test_split_is_within_the_greedy_bound_of_the_best_balance(seed):
    rng = random.Random(seed)
    costs = [rng.expovariate(1.0) for _ in range(30)]
    shards = split_tasks("j1", tasks_with_costs(costs), 4, 1000, cost=by_flop)
    # No split beats max(average load, costliest task); longest-first stays within 4/3 of it.
    lower_bound = max(sum(costs) / len(shards), max(costs))
    assert max(shard.cost for shard in shards) <= 4 / 3 * lower_bound + 1e-9
    assert sum(shard.cost for shard in shards) == pytest.approx(sum(costs))


def test_trial_budget_is_shared_by_task_count_and_sums_to_the_total():
    shards = split_tasks("j1", tasks_with_costs([9, 1, 1, 1, 1, 1, 1, 1]), 2, 100, cost=by_flop)
    assert sum(shard.trial_budget for shard in shards) == 100
    by_size = {len(shard.task_names): shard.trial_budget for shard in shards}
    assert by_size[1] < by_size[7]
    # Fewer trials than tasks and agents: no shard is left without a trial.
    tiny = split_tasks("j1", tasks_with_costs([1] * 10), 5, 3, cost=by_flop)
    assert len(tiny) == 3 and [s.trial_budget for s in tiny] == [1, 1, 1]


def test_with_a_trial_plan_shards_carry_their_tasks_plans_and_balance_by_them():
    planned = [TaskCost(f"t{i}", 1, 1e9, trials) for i, trials in enumerate([40, 30, 10, 10, 5, 0, 0])]
    shards = split_tasks("j1", planned, 2, 100, cost=by_flop)
    assert sum(s.trial_budget for s in shards) == 95  # what the plan gives, not the budget
    trials = {t.name: t.planned for t in planned}
    for shard in shards:
        assert shard.trial_budget == sum(trials[n] for n in shard.task_names)
    assert sorted(s.trial_budget for s in shards) == [45, 50]  # balanced by planned trials x cost per trial
    # No more shards than tasks planned any trial: none would have nothing to measure.
    few = split_tasks("j1", [TaskCost("a", 1, 1e6, 8), TaskCost("b", 1, 1e3, 0), TaskCost("c", 1, 1e3, 0)], 3, 8)
    assert len(few) == 1 and few[0].trial_budget == 8 and set(few[0].task_names) == {"a", "b", "c"}
    with pytest.raises(ValueError, match="plans more trials"):
        split_tasks("j1", [TaskCost("a", 1, 1e6, 9)], 1, 8)


def test_split_refuses_what_it_cannot_split():
    assert split_tasks("j1", [], 3, 10) == []
    with pytest.raises(ValueError, match="unique"):
        split_tasks("j1", [TaskCost("a", 1, 1.0), TaskCost("a", 2, 2.0)], 2, 10)
    with pytest.raises(ValueError, match="at least 1"):
        split_tasks("j1", tasks_with_costs([1]), 1, 0)


def test_estimated_cost_grows_with_flop_and_ignores_weight():
    small, big = TaskCost("a", 1, 1e6), TaskCost("b", 1, 1e11)
    assert estimated_cost(big) > estimated_cost(small) > 0
    assert estimated_cost(TaskCost("c", 12, 1e6)) == estimated_cost(small)


# --- leases and attempt ids --------------------------------------------------------------------


def test_each_lease_gets_the_next_attempt_id():
    shard = one_shard()
    first = lease(shard, "agent-a", now=100.0, ttl=TTL)
    assert (first.attempt, first.agent_id, first.shard.state) == (1, "agent-a", ShardState.LEASED)
    assert first.shard.leased_at == 100.0 and first.expires_at == 130.0
    requeued = fail_attempt(first.shard, 1, "builder crashed")
    assert requeued.state is ShardState.PENDING and requeued.agent_id is None
    second = lease(requeued, "agent-b", now=200.0, ttl=TTL)
    assert (second.attempt, second.agent_id) == (2, "agent-b")


def test_a_leased_shard_cannot_be_leased_again():
    leased = lease(one_shard(), "agent-a", 0.0, TTL).shard
    with pytest.raises(IllegalShardTransition, match="leased to leased"):
        lease(leased, "agent-b", 1.0, TTL)


def test_a_report_from_a_stale_attempt_is_dropped():
    first = lease(one_shard(), "agent-a", 0.0, TTL).shard
    assert accept_report(first, 1, "agent-a")
    (requeued,) = expire([first], {"agent-a": 0.0}, now=31.0, ttl=TTL)
    current = lease(requeued, "agent-b", 32.0, TTL).shard
    # agent-a comes back from a partition and reports under its old attempt.
    assert not accept_report(current, 1, "agent-a")
    assert "attempt 2 replaced it" in stale_reason(current, 1, "agent-a")
    assert accept_report(current, 2, "agent-b")
    assert not accept_report(current, 2, "agent-a")  # right attempt, wrong agent
    assert not accept_report(current, 3)  # never granted
    with pytest.raises(StaleAttempt):
        complete(current, 1, "agent-a")
    with pytest.raises(StaleAttempt):
        fail_attempt(current, 1, "late failure from agent-a")
    done = complete(current, 2, "agent-b")
    assert done.state is ShardState.DONE
    assert not accept_report(done, 2, "agent-b")  # a finished lease takes no more records
    assert "is over: the shard is done" in stale_reason(done, 2)


# --- heartbeat TTL -----------------------------------------------------------------------------


def test_a_missed_heartbeat_ttl_requeues_only_that_agents_shards():
    a = lease(one_shard("j1"), "agent-a", now=0.0, ttl=TTL).shard
    b = lease(one_shard("j2"), "agent-b", now=0.0, ttl=TTL).shard
    pending = one_shard("j3")
    beats = {"agent-a": 10.0, "agent-b": 35.0}
    assert expire([a, b, pending], beats, now=40.0, ttl=TTL) == []  # exactly TTL: not yet
    (requeued,) = expire([a, b, pending], beats, now=40.5, ttl=TTL)
    assert requeued.id == a.id and requeued.state is ShardState.PENDING
    (failure,) = requeued.failures
    assert failure.agent_id == "agent-a" and "no heartbeat for 30s" in failure.reason


def test_taking_a_lease_counts_as_being_alive():
    # The agent's last beat is old, but it leased just now; an agent unknown to the map is
    # silent since its lease.
    shard = lease(one_shard(), "agent-a", now=100.0, ttl=TTL).shard
    assert expire([shard], {"agent-a": 0.0}, now=120.0, ttl=TTL) == []
    assert expire([shard], {}, now=120.0, ttl=TTL) == []
    assert len(expire([shard], {}, now=131.0, ttl=TTL)) == 1


def test_silence_is_judged_only_a_whole_ttl_after_the_coordinator_can_hear_again():
    # Down from 50 to 90 (a restart, or no registry): the agent's last beat heard is at 40, so
    # at 91 it looks silent for 51 s, but nothing it sent from 50 on could be heard. For one TTL
    # after 90 its lease is not judged; a live agent beats within it and keeps the lease.
    shard = lease(one_shard(), "agent-a", now=0.0, ttl=TTL).shard
    beats = {"agent-a": 40.0}
    assert len(expire([shard], beats, now=91.0, ttl=TTL)) == 1  # what judging would do
    for now in (91.0, 110.0, 120.0):
        assert not judges_silence(now, heard_since=90.0, ttl=TTL), now
    assert judges_silence(120.5, heard_since=90.0, ttl=TTL)
    # Past the grace, expiry judges as ever: a beat at 95 keeps it, none since 40 does not.
    assert expire([shard], {"agent-a": 95.0}, now=120.5, ttl=TTL) == []
    assert len(expire([shard], beats, now=120.5, ttl=TTL)) == 1


def test_heartbeat_reconciliation_cancels_stale_leases_and_finds_lost_ones():
    old = lease(one_shard("j1"), "agent-a", now=0.0, ttl=TTL).shard
    (requeued,) = expire([old], {}, now=31.0, ttl=TTL)
    superseded = lease(requeued, "agent-b", now=32.0, ttl=TTL).shard
    mine_old = lease(one_shard("j2"), "agent-a", now=0.0, ttl=TTL).shard
    mine_new = lease(one_shard("j3"), "agent-a", now=59.0, ttl=TTL).shard
    shards = {s.id: s for s in (superseded, mine_old, mine_new)}
    verdict = reconcile_heartbeat(
        "agent-a", [(superseded.id, 1), ("j9.s0", 1)], shards, now=60.0, grace=5.0
    )
    assert [(shard_id, attempt) for shard_id, attempt, _ in verdict.cancel] == [(superseded.id, 1), ("j9.s0", 1)]
    assert "unknown" in verdict.cancel[1][2]
    # mine_old is missing from the heartbeat: lost. mine_new was granted a second ago: not yet.
    assert [s.id for s in verdict.lost] == [mine_old.id]


# --- failing for good --------------------------------------------------------------------------


def test_after_max_attempts_a_shard_fails_with_every_reason():
    shard = one_shard("j1", names=("conv2d", "dense"))
    reasons = []
    for attempt, agent in zip(itertools.count(1), ["agent-a", "agent-b", "agent-c"]):
        assert shard.state is ShardState.PENDING
        shard = lease(shard, agent, now=100.0 * attempt, ttl=TTL).shard
        reason = f"LLVM ran out of memory on {agent}"
        reasons.append(reason)
        shard = fail_attempt(shard, attempt, reason, max_attempts=3)
    assert shard.state is ShardState.FAILED
    assert [f.reason for f in shard.failures] == reasons
    assert [f.attempt for f in shard.failures] == [1, 2, 3]
    with pytest.raises(IllegalShardTransition):
        lease(shard, "agent-d", 500.0, TTL)

    summary = rollup([shard, complete(lease(one_shard("j1", ("other",)), "agent-d", 0.0, TTL).shard, 1)])
    assert summary.outcome is JobOutcome.FAILED and summary.is_final
    assert summary.failed == (shard,)
    assert f"shard {shard.id} (tasks conv2d, dense) failed after 3 attempts" in summary.error
    assert all(reason in summary.error for reason in reasons)


def test_expiry_counts_towards_max_attempts():
    shard = lease(one_shard(), "agent-a", 0.0, TTL).shard
    (shard,) = expire([shard], {}, now=100.0, ttl=TTL, max_attempts=2)
    shard = lease(shard, "agent-b", 101.0, TTL).shard
    (shard,) = expire([shard], {}, now=200.0, ttl=TTL, max_attempts=2)
    assert shard.state is ShardState.FAILED and len(shard.failures) == 2


# --- job rollup --------------------------------------------------------------------------------


def test_rollup_of_a_job():
    shards = split_tasks("j1", tasks_with_costs([3, 2, 1]), 3, 30, cost=by_flop)
    assert rollup(shards).outcome is JobOutcome.TUNING
    leased = [lease(s, f"agent-{i}", 0.0, TTL).shard for i, s in enumerate(shards)]
    assert rollup(leased).counts[ShardState.LEASED] == 3
    done = [complete(s, 1) for s in leased]
    assert rollup(done[:2] + leased[2:]).outcome is JobOutcome.TUNING
    ready = rollup(done)
    assert ready.outcome is JobOutcome.READY_TO_BUILD and ready.error is None
    assert rollup([]).outcome is JobOutcome.READY_TO_BUILD  # nothing to tune


def test_cancelling_a_job_keeps_finished_shards():
    shards = split_tasks("j1", tasks_with_costs([3, 2, 1]), 3, 30, cost=by_flop)
    done = complete(lease(shards[0], "agent-a", 0.0, TTL).shard, 1)
    leased = lease(shards[1], "agent-b", 0.0, TTL).shard
    cancelled = cancel_unfinished([done, leased, shards[2]])
    assert [s.id for s in cancelled] == [leased.id, shards[2].id]
    assert all(s.state is ShardState.CANCELLED for s in cancelled)
    assert not accept_report(cancelled[0], 1, "agent-b")
    assert rollup([done, *cancelled]).outcome is JobOutcome.CANCELLED


def test_next_pending_is_the_costliest():
    shards = split_tasks("j1", tasks_with_costs([1, 5, 3]), 3, 30, cost=by_flop)
    first = next_pending(shards)
    assert first.task_names == ("t1",)
    rest = [s for s in shards if s.id != first.id] + [lease(first, "a", 0.0, TTL).shard]
    assert next_pending(rest).task_names == ("t2",)
    assert next_pending([]) is None


# --- the transition table ----------------------------------------------------------------------

LEGAL = {
    (ShardState.PENDING, ShardState.LEASED),
    (ShardState.PENDING, ShardState.CANCELLED),
    (ShardState.LEASED, ShardState.PENDING),
    (ShardState.LEASED, ShardState.DONE),
    (ShardState.LEASED, ShardState.FAILED),
    (ShardState.LEASED, ShardState.CANCELLED),
}


@pytest.mark.parametrize("current,new", list(itertools.product(ShardState, ShardState)))
def test_transition_table(current, new):
    if (current, new) in LEGAL:
        assert check_transition(current.value, new.value) is new
    else:
        with pytest.raises(IllegalShardTransition, match=f"from {current.value} to {new.value}"):
            check_transition(current, new)


def test_illegal_transitions_raise_the_common_error_and_bad_names_raise():
    assert issubclass(IllegalShardTransition, IllegalTransition)
    assert {s for s in ShardState if s.is_final} == {ShardState.DONE, ShardState.FAILED, ShardState.CANCELLED}
    with pytest.raises(ValueError):
        check_transition("pending", "exploded")
    done = complete(lease(one_shard(), "a", 0.0, TTL).shard, 1)
    with pytest.raises(IllegalShardTransition):
        done.moved(ShardState.PENDING)


def test_allowed_sources_is_the_guard_for_bulk_updates():
    assert allowed_sources(ShardState.CANCELLED) == {ShardState.PENDING, ShardState.LEASED}
    assert allowed_sources("leased") == {ShardState.PENDING}
    assert allowed_sources(ShardState.PENDING) == {ShardState.LEASED}
    for new in ShardState:
        for source in allowed_sources(new):
            check_transition(source, new)


@pytest.mark.parametrize(("budget", "done", "planned", "expected"), [
    (64, 0, [32, 32], (64, (32, 32))),      # a first lease: all of it
    (64, 16, [32, 32], (48, (24, 24))),     # re-queued: what is left, each task cut to fit
    (64, 16, [8, 0, 8], (48, (8, 0, 8))),   # planned trials that fit stay; 0 stays "none planned"
    (8, 8, [4, 4], (1, (1, 1))),            # all reported: one trial, so that the lease completes
    (8, 99, [4, 4], (1, (1, 1))),
])
def test_a_lease_measures_what_earlier_attempts_left_of_the_budget(budget, done, planned, expected):
    assert trials_left(budget, done, planned) == expected
