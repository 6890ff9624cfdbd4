"""The agent's state machine (agent.state) on its own: events in, instructions out, no I/O."""

from __future__ import annotations

import random

import pytest

from agent.state import (
    FULL_HEARTBEAT_EVERY,
    AgentState,
    Beat,
    InvalidState,
    InvalidTransition,
    Registration,
    Work,
    heartbeat_due,
)
from agent.state.events import (
    AgentStarted,
    CallFailed,
    CancelLeaseOrder,
    CoordinatorForgotUs,
    HeartbeatAnswered,
    HeartbeatIntervalOrder,
    HeartbeatTick,
    Lease,
    NothingToLease,
    NothingToValidate,
    Registered,
    ReportAccepted,
    ReportRefused,
    ReRegisterOrder,
    RPCServerStarted,
    ShardCompleted,
    ShardFailed,
    ShardFailureReported,
    ShardLeased,
    ShardStopped,
    ShardTuned,
    StopRequested,
    ValidationDone,
    ValidationLeased,
    WaitOver,
)
from agent.state.instructions import (
    CancelShard,
    CompleteShard,
    FailShard,
    LeaseShard,
    LeaseValidation,
    Register,
    ScheduleHeartbeat,
    SendHeartbeat,
    Shutdown,
    StartRPCServer,
    StartShard,
    ValidateLibrary,
    Wait,
)
from agent.state.policy import BEATS_FAILED_SAID_EVERY, RETRIES_SAID_EVERY, RETRIES_SAID_FIRST, retry_said
from agent.state.story import Stimulus, Transition

INTERVAL = 5.0
NEVER = float("-inf")
LEASE = Lease("job-1", "job-1/shard-0", 1)


# ---------------------------------------------------------------------- when a heartbeat is due


@pytest.mark.parametrize(
    ("now", "last_sent_at", "unchanged", "last_report_at", "due", "why"),
    [
        (5.0, NEVER, False, NEVER, True, "the first beat"),
        (10.0, 5.0, True, NEVER, True, "no report: an idle agent beats every interval"),
        (10.0, 5.0, True, 3.0, True, "the last report is older than the interval"),
        (10.0, 5.0, True, 8.0, False, "a report in the last interval said it all"),
        (10.0, 5.0, False, 8.0, True, "its lease list or RPC server changed"),
        (5.0 + (FULL_HEARTBEAT_EVERY - 1) * INTERVAL, 5.0, True, 30.0, False, "not yet a full beat's turn"),
        (5.0 + FULL_HEARTBEAT_EVERY * INTERVAL, 5.0, True, 34.0, True, "a full beat every few intervals"),
    ],
)
def test_heartbeat_due(now, last_sent_at, unchanged, last_report_at, due, why):
    assert heartbeat_due(now, last_sent_at, unchanged, last_report_at, INTERVAL) is due, why


# ---------------------------------------------------------------------- helpers


def started(**options) -> AgentState:
    """An agent registered as agent-1, its RPC server started: it asks for a validation."""
    state = AgentState(validate=True, **options)
    assert state.handle(AgentStarted()) == [Register()]
    assert state.handle(Registered("agent-1", INTERVAL, "tracker")) == [StartRPCServer("tracker")]
    assert state.handle(RPCServerStarted()) == [ScheduleHeartbeat(INTERVAL), LeaseValidation("agent-1")]
    return state


def tuning(**options) -> AgentState:
    """A started agent that leased LEASE (no validation waiting) and tunes it."""
    state = started(**options)
    assert state.handle(NothingToValidate()) == [LeaseShard("agent-1", max_wait=20, timeout=30)]
    assert state.handle(ShardLeased(LEASE, "the shard")) == [StartShard(LEASE, "the shard")]
    return state


def beat(state: AgentState, now: float, serving: bool = True) -> list:
    """The instructions of a heartbeat tick; a beat sent is answered at once, with nothing."""
    out = state.handle(HeartbeatTick(now, serving))
    if any(isinstance(i, SendHeartbeat) for i in out):
        assert state.handle(HeartbeatAnswered()) == [ScheduleHeartbeat(state.heartbeat_interval)]
    return out


# ---------------------------------------------------------------------- registration


def test_an_agent_registers_starts_its_rpc_server_then_beats_and_asks_for_work():
    state = started()
    assert (state.registration, state.work, state.beat) == (Registration.REGISTERED, Work.ASKING_VALIDATION,
                                                           Beat.SCHEDULED)
    assert state.agent_id == "agent-1" and state.tracker == "tracker"
    assert beat(state, 10.0) == [SendHeartbeat("agent-1", (), True, timeout=INTERVAL)]


def test_the_heartbeat_interval_is_the_coordinators_but_never_below_a_fifth_of_a_second():
    state = AgentState(validate=True)
    state.handle(AgentStarted())
    state.handle(Registered("agent-1", 0.01, "tracker"))
    assert state.handle(RPCServerStarted())[0] == ScheduleHeartbeat(0.2)
    assert state.handle(HeartbeatTick(1.0))[0].timeout == 2.0, "a beat may take 2 s at least"
    assert state.handle(HeartbeatAnswered((HeartbeatIntervalOrder(3.0),))) == [ScheduleHeartbeat(3.0)]


def test_a_forgotten_agent_registers_again_under_its_id_once_and_is_quiet_meanwhile():
    state = started()
    assert beat(state, 10.0)
    state.handle(HeartbeatTick(15.0))
    assert state.handle(HeartbeatAnswered((ReRegisterOrder("unknown agent"),))) == [
        Register("agent-1"), ScheduleHeartbeat(INTERVAL)]
    assert state.registration is Registration.REGISTERING
    # Told again (another call found the agent unknown too): one registration is enough.
    assert state.handle(CoordinatorForgotUs("restarted")) == []
    assert state.handle(CallFailed("LeaseValidation", "NOT_FOUND", "who?")) == []
    assert state.work is Work.AWAITING_REGISTRATION
    assert state.handle(HeartbeatTick(20.0)) == [ScheduleHeartbeat(INTERVAL)], "no beat while registering"
    assert state.handle(Registered("agent-1", INTERVAL, "tracker")) == [LeaseValidation("agent-1")]
    assert beat(state, 25.0) == [SendHeartbeat("agent-1", (), True, timeout=INTERVAL)]


@pytest.mark.parametrize("call", ["Heartbeat", "LeaseValidation"])
@pytest.mark.parametrize("code", ["NOT_FOUND", "FAILED_PRECONDITION"])
def test_calls_that_find_the_agent_unknown_make_it_register_again(call, code):
    state = started()
    if call == "Heartbeat":
        state.handle(HeartbeatTick(10.0))
        assert state.handle(CallFailed(call, code)) == [Register("agent-1"), ScheduleHeartbeat(INTERVAL)]
    else:
        assert state.handle(CallFailed(call, code)) == [Register("agent-1")]
        assert state.handle(Registered("agent-1", INTERVAL, "tracker")) == [LeaseValidation("agent-1")]


def test_registration_is_retried_with_backoff_while_the_coordinator_is_away():
    state = AgentState(validate=True, backoff_jitter=0)  # the doubling itself (the spread: test_backoff_spreads...)
    state.handle(AgentStarted())
    waits = []
    for _ in range(6):
        (register,) = state.handle(CallFailed("Register", "UNAVAILABLE", "connection refused"))
        assert register.previous_agent_id == ""
        waits.append(register.after)
    assert waits == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert state.handle(Registered("agent-1", INTERVAL, "tracker")) == [StartRPCServer("tracker")]


def test_an_outage_is_said_on_the_first_tries_then_now_and_then_and_afresh_after_an_answer():
    # Registering and asking for work through a coordinator away for many tries: the first
    # RETRIES_SAID_FIRST failures are said, then every RETRIES_SAID_EVERY-th, not every try.
    state = AgentState(validate=True, backoff_jitter=0)
    state.handle(AgentStarted())
    whys = [state.handle(CallFailed("Register", "UNAVAILABLE", "connection refused"))[0].why for _ in range(30)]
    said = [n for n, why in enumerate(whys, start=1) if why]
    assert said == [1, 2, 3, RETRIES_SAID_EVERY, 2 * RETRIES_SAID_EVERY], said
    assert all(why.startswith("register: coordinator unavailable (connection refused); retrying in ")
               for why in whys if why)
    assert whys[0].endswith(" s") and whys[2].endswith(f"(try 3; said every {RETRIES_SAID_EVERY} tries from now on)")
    assert whys[RETRIES_SAID_EVERY - 1].endswith(f"(try {RETRIES_SAID_EVERY})")
    state.handle(Registered("agent-1", INTERVAL, "tracker"))
    state.handle(RPCServerStarted())
    # Registered: the next outage is said from its first try again; so are the calls for work.
    for _ in range(RETRIES_SAID_EVERY + 1):
        (wait,) = state.handle(CallFailed("LeaseValidation", "UNAVAILABLE", "connection refused"))
        whys.append(wait.why)
        state.handle(WaitOver())
    work = whys[30:]
    assert [n for n, why in enumerate(work, start=1) if why] == [1, 2, 3, RETRIES_SAID_EVERY]
    assert "UNAVAILABLE: connection refused" in work[0]
    state.handle(NothingToValidate())
    state.handle(NothingToLease(1.0))
    state.handle(WaitOver())
    assert "UNAVAILABLE" in state.handle(CallFailed("LeaseValidation", "UNAVAILABLE", "again"))[0].why


@pytest.mark.parametrize(("failed", "said"), [
    (1, ""), (RETRIES_SAID_FIRST, f" (try {RETRIES_SAID_FIRST}; said every {RETRIES_SAID_EVERY} tries from now on)"),
    (RETRIES_SAID_FIRST + 1, None), (RETRIES_SAID_EVERY - 1, None),
    (RETRIES_SAID_EVERY, f" (try {RETRIES_SAID_EVERY})"),
    (5 * RETRIES_SAID_EVERY, f" (try {5 * RETRIES_SAID_EVERY})"), (5 * RETRIES_SAID_EVERY + 1, None),
])
def test_retry_said(failed, said):
    assert retry_said(failed) == said


def test_a_refused_registration_stops_the_agent_and_its_shard_with_the_coordinators_reason():
    state = AgentState(validate=True)
    state.handle(AgentStarted())
    (shutdown,) = state.handle(CallFailed("Register", "FAILED_PRECONDITION", "install apache-tvm==0.27"))
    assert isinstance(shutdown, Shutdown) and "apache-tvm==0.27" in shutdown.error
    assert state.work is Work.STOPPED and state.registration is Registration.REFUSED
    # Refused while tuning (a re-registration): the shard is cancelled too.
    state = tuning()
    state.handle(CoordinatorForgotUs())
    cancel, shutdown = state.handle(CallFailed("Register", "INVALID_ARGUMENT", "target kinds"))
    assert cancel == CancelShard(LEASE, shutdown.error) and "target kinds" in shutdown.error


# ---------------------------------------------------------------------- heartbeats


def test_a_busy_agent_skips_the_beats_its_accepted_reports_made_redundant():
    state = tuning()
    assert beat(state, 10.0) == [SendHeartbeat("agent-1", (LEASE,), True, timeout=INTERVAL)]
    state.handle(ReportAccepted(13.0))
    assert beat(state, 15.0) == [ScheduleHeartbeat(INTERVAL)], "a report in the last interval said it all"
    assert beat(state, 15.5, serving=False)[0] == SendHeartbeat("agent-1", (LEASE,), False, timeout=INTERVAL), \
        "its RPC server stopped serving: news"
    for now in (20.0, 25.0, 30.0, 35.0, 40.0):
        state.handle(ReportAccepted(now - 1))
        assert beat(state, now, serving=False) == [ScheduleHeartbeat(INTERVAL)], now
    state.handle(ReportAccepted(44.0))
    assert isinstance(beat(state, 45.0, serving=False)[0], SendHeartbeat), "a full beat every few intervals"
    state.handle(ShardTuned(LEASE))
    assert beat(state, 50.0, serving=False)[0] == SendHeartbeat("agent-1", (LEASE,), False, timeout=INTERVAL), \
        "listed until its CompleteShard is answered"
    state.handle(ShardCompleted(LEASE))
    assert beat(state, 50.5, serving=False)[0] == SendHeartbeat("agent-1", (), False, timeout=INTERVAL)


def test_an_agent_told_to_send_every_beat_does():
    state = tuning(skip_redundant_heartbeats=False)
    for now in (10.0, 15.0, 20.0):
        state.handle(ReportAccepted(now - 0.5))
        assert isinstance(beat(state, now)[0], SendHeartbeat)


def test_one_beat_at_a_time_and_failed_beats_are_retried_at_the_next_tick():
    state = started()
    state.handle(HeartbeatTick(10.0))
    with pytest.raises(InvalidTransition):
        state.handle(HeartbeatTick(10.5))
    (again,) = state.handle(CallFailed("Heartbeat", "UNAVAILABLE", "gone"))
    assert again.seconds == INTERVAL and "UNAVAILABLE" in again.why
    assert isinstance(state.handle(HeartbeatTick(15.0))[0], SendHeartbeat)


def test_heartbeats_failing_for_minutes_are_said_once_then_now_and_then_and_their_end():
    state = started()
    whys = []
    now = 10.0
    for _ in range(130):  # a coordinator away for 130 intervals
        state.handle(HeartbeatTick(now))
        (again,) = state.handle(CallFailed("Heartbeat", "UNAVAILABLE", "its registry is failing"))
        assert again.seconds == INTERVAL  # still every interval: the lease's TTL counts
        whys.append(again.why)
        now += INTERVAL
    said = [(i + 1, why) for i, why in enumerate(whys) if why]
    assert [n for n, _ in said] == [1, BEATS_FAILED_SAID_EVERY, 2 * BEATS_FAILED_SAID_EVERY], said
    assert "its registry is failing" in said[0][1] and f"after {BEATS_FAILED_SAID_EVERY} tries" in said[1][1]
    state.handle(HeartbeatTick(now))
    assert state.handle(HeartbeatAnswered()) == [ScheduleHeartbeat(INTERVAL, "heartbeat answered again after "
                                                                            "130 failed tries")]
    state.handle(HeartbeatTick(now + 100))
    assert state.handle(HeartbeatAnswered()) == [ScheduleHeartbeat(INTERVAL)]


# ---------------------------------------------------------------------- leases and their cancellation


def test_a_validation_comes_first_then_a_shard_is_tuned_and_completed():
    state = started()
    assert state.handle(ValidationLeased("the validation")) == [ValidateLibrary("agent-1", "the validation")]
    assert state.handle(ValidationDone()) == [LeaseValidation("agent-1")]
    state.handle(NothingToValidate())
    state.handle(ShardLeased(LEASE, "the shard"))
    assert state.handle(ShardTuned(LEASE, ("task",), 64, 9.5)) == [
        CompleteShard("agent-1", LEASE, ("task",), 64, 9.5)]
    assert state.handle(ShardCompleted(LEASE)) == [LeaseValidation("agent-1")]
    assert state.lease is None


def test_a_failed_shard_is_reported_once_and_the_agent_carries_on():
    state = tuning()
    assert state.handle(ShardFailed(LEASE, "RuntimeError: boom")) == [
        FailShard("agent-1", LEASE, "RuntimeError: boom")]
    assert state.handle(ShardFailureReported(LEASE)) == [LeaseValidation("agent-1")]
    state = tuning()
    state.handle(ShardFailed(LEASE, "RuntimeError: boom"))
    assert state.handle(CallFailed("FailShard", "UNAVAILABLE")) == [LeaseValidation("agent-1")], "not retried"


def test_a_heartbeats_cancel_reaches_the_running_lease_which_is_then_not_completed():
    state = tuning()
    state.handle(HeartbeatTick(10.0))
    other = Lease("job-2", "job-2/shard-3", 1)
    out = state.handle(HeartbeatAnswered((CancelLeaseOrder(other, "not yours"),
                                          CancelLeaseOrder(LEASE, "job cancelled"))))
    assert out == [CancelShard(LEASE, "job cancelled"), ScheduleHeartbeat(INTERVAL)]
    assert beat(state, 15.0)[0].leases == (LEASE,), "listed until its tuning stopped"
    assert state.handle(ShardTuned(LEASE)) == [LeaseValidation("agent-1")], "a cancelled shard is not completed"
    state = tuning()
    state.handle(HeartbeatTick(10.0))
    state.handle(HeartbeatAnswered((CancelLeaseOrder(LEASE, "lease lapsed"),)))
    assert state.handle(ShardStopped(LEASE)) == [LeaseValidation("agent-1")]


def test_a_refused_report_stops_its_attempt_but_not_another():
    state = tuning()
    assert state.handle(ReportRefused(Lease(LEASE.job_id, LEASE.shard_id, 2), "attempt 2 is over")) == []
    assert state.handle(ReportRefused(LEASE, "attempt 1 is over")) == [
        CancelShard(LEASE, "attempt 1 is stale (attempt 1 is over)")]
    assert state.handle(ReportRefused(LEASE, "attempt 1 is over")) == [], "cancelled once"
    assert state.handle(ShardFailed(LEASE, "CancelledError")) == [LeaseValidation("agent-1")], "not reported"


# ---------------------------------------------------------------------- waits and backoff


def test_nothing_to_lease_waits_as_the_coordinator_asks_within_bounds():
    for asked, waited in ((None, 1.0), (0.0, 0.0), (2.5, 2.5), (30.0, 5.0), (-1.0, 0.0)):
        state = started()
        state.handle(NothingToValidate())
        assert state.handle(NothingToLease(asked)) == [Wait(waited)], asked
        assert state.handle(WaitOver()) == [LeaseValidation("agent-1")]


def test_failed_work_calls_back_off_until_the_coordinator_answers():
    state = started(backoff_jitter=0)
    waits = []
    for _ in range(7):
        (wait,) = state.handle(CallFailed("LeaseValidation", "UNAVAILABLE", "connection refused"))
        waits.append(wait.seconds)
        assert state.handle(WaitOver()) == [LeaseValidation("agent-1")]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    state.handle(NothingToValidate())
    state.handle(NothingToLease(1.0))
    state.handle(WaitOver())
    assert state.handle(CallFailed("LeaseValidation", "INTERNAL"))[0].seconds == 0.5, "an answer resets it"
    # A CompleteShard that failed is not retried: the agent backs off and asks for work.
    state = tuning(backoff_jitter=0)
    state.handle(ShardTuned(LEASE))
    assert state.handle(CallFailed("CompleteShard", "DEADLINE_EXCEEDED"))[0].seconds == 0.5
    assert state.lease is None and state.handle(WaitOver()) == [LeaseValidation("agent-1")]


def test_backoff_spreads_each_wait_over_its_upper_half_so_a_fleet_does_not_retry_in_step():
    # Agents whose calls failed together (a coordinator restart, its registry lost): each
    # agent's waits double as before, each drawn from [wait / 2, wait].
    fleet = []
    for seed in range(20):
        draws = random.Random(seed)
        state = started(draw=draws.random)
        waits = []
        for _ in range(7):
            (wait,) = state.handle(CallFailed("LeaseValidation", "UNAVAILABLE", "the registry is failing"))
            waits.append(wait.seconds)
            state.handle(WaitOver())
        for got, envelope in zip(waits, [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]):
            assert envelope / 2 <= got <= envelope, (waits, seed)
        fleet.append(tuple(waits))
    assert len(set(fleet)) == len(fleet), "agents failing together would retry together"
    # The same draws give the same waits: the machine stays deterministic given its inputs.
    again = started(draw=random.Random(0).random)
    assert again.handle(CallFailed("LeaseValidation", "UNAVAILABLE"))[0].seconds == fleet[0][0]
    # Registrations retried while the coordinator is away are spread the same way.
    state = AgentState(validate=True, draw=random.Random(1).random)
    state.handle(AgentStarted())
    afters = [state.handle(CallFailed("Register", "UNAVAILABLE"))[0].after for _ in range(6)]
    assert all(e / 2 <= a <= e for a, e in zip(afters, [0.5, 1.0, 2.0, 4.0, 5.0, 5.0])), afters
    assert len(set(afters[-2:])) == 2, afters


# ---------------------------------------------------------------------- stop


@pytest.mark.parametrize("step", ["registering", "asking", "waiting", "awaiting registration"])
def test_an_agent_without_work_under_way_stops_at_once_and_drops_late_answers(step):
    if step == "registering":
        state = AgentState(validate=True)
        state.handle(AgentStarted())
    else:
        state = started()
        if step == "waiting":
            state.handle(CallFailed("LeaseValidation", "UNAVAILABLE"))
        elif step == "awaiting registration":
            state.handle(CallFailed("LeaseValidation", "NOT_FOUND"))
    assert state.handle(StopRequested()) == [Shutdown()]
    assert state.work is Work.STOPPED and state.beat is Beat.STOPPED
    assert state.handle(ShardLeased(LEASE), Registered("agent-1", INTERVAL, "t"), WaitOver(), StopRequested()) == []


def test_a_stopped_agent_finishes_and_completes_its_shard_without_beating_or_new_work():
    state = tuning()
    assert state.handle(StopRequested()) == []
    assert state.handle(HeartbeatTick(10.0)) == [], "no more beats"
    assert state.handle(CoordinatorForgotUs()) == [], "no registration on the way out"
    assert state.handle(ShardTuned(LEASE)) == [CompleteShard("agent-1", LEASE)]
    assert state.handle(ShardCompleted(LEASE)) == [Shutdown()]
    state = started()
    state.handle(ValidationLeased("v"))
    state.handle(StopRequested())
    assert state.handle(ValidationDone()) == [Shutdown()]


# ---------------------------------------------------------------------- the table


def test_events_the_state_does_not_expect_raise():
    state = started()
    for event in (ShardLeased(LEASE), ShardTuned(LEASE), Registered("agent-2", INTERVAL, "t"), WaitOver(),
                  HeartbeatAnswered(), ValidationDone()):
        with pytest.raises(InvalidTransition):
            state.handle(event)
    state = tuning()
    with pytest.raises(InvalidTransition):
        state.handle(ShardTuned(Lease(LEASE.job_id, LEASE.shard_id, 2)))
    with pytest.raises(InvalidTransition):
        AgentState(validate=True).handle(RPCServerStarted())


def test_every_state_can_stop_and_every_transition_has_a_step():
    transitions = AgentState.TRANSITIONS
    for work in Work:
        if work is not Work.STOPPED:
            assert (work, Work.STOPPED) in transitions, f"{work} cannot stop"
    for beat_state in (Beat.OFF, Beat.SCHEDULED, Beat.IN_FLIGHT):
        assert (beat_state, Beat.STOPPED) in transitions
    reachable = {to for _from, to in transitions} | {Work.NOT_STARTED, Beat.OFF, Registration.UNREGISTERED}
    assert reachable == {*Work, *Beat, *Registration}, "a state no transition leads to"
    assert all(callable(step) for step in transitions.values())


# ---------------------------------------------------------------------- debugging aids


def test_every_event_has_a_stimulus_id_of_its_own_unless_the_caller_names_one():
    first, second = WaitOver(), WaitOver()
    assert first.stimulus_id.startswith("WaitOver-") and first.stimulus_id != second.stimulus_id
    assert first == second, "the id takes no part in comparing events"
    assert CallFailed("Register", "UNAVAILABLE", stimulus_id="register-7").stimulus_id == "register-7"


def test_the_story_of_a_shard_tells_which_event_moved_the_agent_and_what_it_was_told_to_do():
    state = tuning()
    state.handle(ShardTuned(LEASE, stimulus_id="tuned-1"), ShardCompleted(LEASE, stimulus_id="completed-1"))
    story = state.story(LEASE.shard_id)
    assert [type(entry) for entry in story][:2] == [Stimulus, Transition]
    assert story[0] == Stimulus("ShardLeased", LEASE.shard_id, story[0].stimulus_id)
    assert story[1] == Transition("work", "asking for a shard", "tuning", LEASE.shard_id, story[0].stimulus_id,
                                  ("StartShard",))
    assert Transition("work", "tuning", "closing the shard", LEASE.shard_id, "tuned-1", ("CompleteShard",)) in story
    assert state.story("completed-1") == [
        Stimulus("ShardCompleted", LEASE.shard_id, "completed-1"),
        Transition("work", "closing the shard", "asking for a validation", None, "completed-1", ("LeaseValidation",)),
    ]


def test_the_log_keeps_its_newest_entries_only():
    state = started(log_length=5)
    for now in range(1, 20):
        beat(state, float(now * INTERVAL * FULL_HEARTBEAT_EVERY))
    assert len(state.log) == 5
    assert state.log[-1] == Transition("beat", "in flight", "scheduled", None, state.log[-2].stimulus_id,
                                       ("ScheduleHeartbeat",))


def test_validate_state_finds_regions_that_disagree():
    state = tuning()
    state.validate_state()  # as events leave it
    state.lease = None
    with pytest.raises(InvalidState, match="tuning without a lease"):
        state.validate_state()
    state = started()
    state.stopping = True
    with pytest.raises(InvalidState, match="stopping, but still beating"):
        state.validate_state()

