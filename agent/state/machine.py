"""The agent's decisions as a state machine: events in, instructions out, no I/O and no clock.

After dask's `distributed/worker_state_machine.py`: `AgentState.handle(*events)` takes what
happened (agent.state.events) and returns what to do (agent.state.instructions); an executor
(agent.daemon, or a fake agent with fake I/O) carries the instructions out and hands their
outcomes back as events. Times come in with the events.

The agent is three regions, each an Enum, that move independently:

- ``Registration``: unregistered -> registering -> registered, and back to registering when the
  coordinator forgot the agent (a heartbeat's ReRegister, or NOT_FOUND / FAILED_PRECONDITION);
  a registration retried while the coordinator is away; refused ends the agent.
- ``Work``, the agent's one work slot: ask for a validation, then for a shard (a long poll);
  tune it or validate; close the shard (CompleteShard or FailShard); ask again. The coordinator
  may ask it to come back later (retry_after), failed calls back off, a forgotten agent waits
  for its registration. After a stop no new work starts; a shard or validation under way ends
  first (its shard is completed), then the agent shuts down.
- ``Beat``, the heartbeat chain: off until the RPC server was started, then scheduled and in
  flight in turn, one beat at a time; a beat with nothing new to say is skipped
  (agent.state.policy.heartbeat_due).

Every change of state goes through `_transition`, which finds (from, to) in the one table
`AgentState.TRANSITIONS` (the method there enters the new state and returns its instructions);
a pair not in the table raises InvalidTransition, as does an event the state does not expect.
Once the agent is stopped, events are late answers to calls in flight and are dropped.

Debugging aids, as dask's: each event's ``stimulus_id`` goes into a bounded log (`log`) with
the event and every change of state it caused; `story(*keys)` picks out of it what concerns a
shard, a stimulus, a region or a state; `validate_state()` checks what must hold between the
regions, and with ``validate=True`` (the tests') runs after every event.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from functools import singledispatchmethod
from typing import ClassVar

from agent.state.events import (
    AgentStarted,
    CallFailed,
    CancelLeaseOrder,
    CoordinatorForgotUs,
    Event,
    HeartbeatAnswered,
    HeartbeatIntervalOrder,
    HeartbeatTick,
    Lease,
    NothingToLease,
    NothingToValidate,
    Registered,
    ReportAccepted,
    ReportRefused,
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
    Instruction,
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
from agent.state.policy import (
    BACKOFF_JITTER,
    BEATS_FAILED_SAID_EVERY,
    FORGOTTEN_CODES,
    LEASE_WAIT_S,
    MAX_RETRY_AFTER_S,
    MIN_HEARTBEAT_INTERVAL_S,
    TRANSIENT_CODES,
    Backoff,
    heartbeat_due,
    retry_said,
)
from agent.state.states import (
    REGION,
    Beat,
    InvalidState,
    InvalidTransition,
    Registration,
    State,
    Work,
    broken_invariants,
)
from agent.state.story import LOG_LENGTH, Stimulus, Transition, shard_of, story

# The work loop's calls, and where the loop is while each is in flight.
_ASKING = {"LeaseValidation": Work.ASKING_VALIDATION, "LeaseShard": Work.ASKING_SHARD,
           "CompleteShard": Work.CLOSING_SHARD, "FailShard": Work.CLOSING_SHARD}


class AgentState:
    """One agent's state; ``handle`` is its only entry.

    ``lease_wait`` is how long an idle agent lets the coordinator hold its LeaseShard (0: not
    held); ``skip_redundant_heartbeats`` False sends every beat that falls due; ``backoff_jitter``
    and ``draw`` spread the waits after failed calls (agent.state.policy.Backoff). ``validate``
    runs `validate_state` after every event; ``log_length`` bounds `log`.
    """

    def __init__(self, lease_wait: float = LEASE_WAIT_S, skip_redundant_heartbeats: bool = True,
                 backoff_jitter: float = BACKOFF_JITTER, draw: Callable[[], float] = random.random,
                 validate: bool = False, log_length: int = LOG_LENGTH):
        self.lease_wait = lease_wait
        self.skip_redundant_heartbeats = skip_redundant_heartbeats
        self.registration = Registration.UNREGISTERED
        self.work = Work.NOT_STARTED
        self.beat = Beat.OFF
        self.agent_id = ""
        self.tracker = None  # from the last registration
        self.heartbeat_interval = 5.0
        # The shard lease held, from its grant until its tuning ended and the shard is closed;
        # heartbeats list it all that time.
        self.lease: Lease | None = None
        self.lease_cancelled = False
        self.stopping = False
        self._work_backoff = Backoff(0.5, 10.0, backoff_jitter, draw)
        self._register_backoff = Backoff(0.5, 5.0, backoff_jitter, draw)
        self._last_sent_at = float("-inf")  # when the last beat was sent
        self._last_said: tuple | None = None  # what it said
        self._last_report_at = float("-inf")  # when a report was last accepted
        self._beats_failed = 0  # heartbeats failed in a row
        self._registers_failed = 0  # registrations failed in a row
        self._work_calls_failed = 0  # calls for work failed in a row
        self.validate = validate
        # What happened, newest last: a Stimulus per event, a Transition per change of state.
        self.log: deque[Stimulus | Transition] = deque(maxlen=log_length)
        self._stimulus_id = ""  # of the event being handled

    def __repr__(self) -> str:
        return (f"<AgentState {self.agent_id or '(unregistered)'}: registration {self.registration.value}, "
                f"work {self.work.value}, beat {self.beat.value}>")

    def handle(self, *events: Event) -> list[Instruction]:
        """Take events in order; return the instructions they lead to, in order."""
        instructions: list[Instruction] = []
        for event in events:
            if self.work is not Work.STOPPED:
                self._stimulus_id = event.stimulus_id
                self.log.append(Stimulus(type(event).__name__, shard_of(event), event.stimulus_id))
                instructions += self._handle(event)
                if self.validate:
                    self.validate_state()
        return instructions

    # ------------------------------------------------------------------ debugging aids

    def story(self, *keys: str) -> list[Stimulus | Transition]:
        """The log's entries that name any of ``keys`` (agent.state.story.story), oldest first."""
        return story(self.log, *keys)

    def validate_state(self) -> None:
        """Raise InvalidState unless the three regions and the lease agree, as every run of
        events leaves them; the message names what broke, and the log's last entries."""
        broken = broken_invariants(self)
        if broken:
            recent = "; ".join(repr(entry) for entry in list(self.log)[-5:])
            raise InvalidState(f"{self!r}: {', '.join(broken)} (last: {recent})")

    # ------------------------------------------------------------------ events

    @singledispatchmethod
    def _handle(self, event: Event) -> list[Instruction]:
        raise TypeError(f"not an agent event: {event!r}")

    @_handle.register
    def _(self, event: AgentStarted) -> list[Instruction]:
        return self._transition(Work.STARTING) + self._transition(Registration.REGISTERING)

    @_handle.register
    def _(self, event: Registered) -> list[Instruction]:
        self._expect(self.registration is Registration.REGISTERING, event)
        self.agent_id = event.agent_id
        self.heartbeat_interval = max(MIN_HEARTBEAT_INTERVAL_S, event.heartbeat_interval)
        self.tracker = event.tracker
        out = self._transition(Registration.REGISTERED)
        if self.work is Work.STARTING:
            out += self._transition(Work.STARTING_RPC_SERVER)
        elif self.work is Work.AWAITING_REGISTRATION:
            out += self._transition(Work.ASKING_VALIDATION)
        return out

    @_handle.register
    def _(self, event: RPCServerStarted) -> list[Instruction]:
        return self._transition(Beat.SCHEDULED) + self._transition(Work.ASKING_VALIDATION)

    @_handle.register
    def _(self, event: HeartbeatTick) -> list[Instruction]:
        if self.beat is Beat.STOPPED:
            return []
        self._expect(self.beat is Beat.SCHEDULED, event)
        if self.registration is not Registration.REGISTERED:
            return self._transition(Beat.SCHEDULED)  # nothing to say until registered
        leases = () if self.lease is None else (self.lease,)
        said = (self.agent_id, event.rpc_server_serving, tuple((lease.shard_id, lease.attempt) for lease in leases))
        if self.skip_redundant_heartbeats and not heartbeat_due(
                event.now, self._last_sent_at, said == self._last_said, self._last_report_at,
                self.heartbeat_interval):
            return self._transition(Beat.SCHEDULED)
        self._last_sent_at, self._last_said = event.now, said
        return self._transition(Beat.IN_FLIGHT, leases=leases, serving=event.rpc_server_serving)

    @_handle.register
    def _(self, event: HeartbeatAnswered) -> list[Instruction]:
        if self.beat is Beat.STOPPED:
            return []
        self._expect(self.beat is Beat.IN_FLIGHT, event)
        out: list[Instruction] = []
        why = f"heartbeat answered again after {self._beats_failed} failed tries" if self._beats_failed else ""
        self._beats_failed = 0
        for order in event.orders:
            if isinstance(order, CancelLeaseOrder):
                out += self._cancel(order.lease.shard_id, order.reason)
            elif isinstance(order, HeartbeatIntervalOrder):
                self.heartbeat_interval = max(MIN_HEARTBEAT_INTERVAL_S, order.seconds)
            else:
                out += self._forgotten()
        return out + self._transition(Beat.SCHEDULED, why=why)

    @_handle.register
    def _(self, event: CoordinatorForgotUs) -> list[Instruction]:
        return self._forgotten()

    @_handle.register
    def _(self, event: CallFailed) -> list[Instruction]:
        forgotten = event.code in FORGOTTEN_CODES
        if event.call == "Register":
            self._expect(self.registration is Registration.REGISTERING, event)
            if self.stopping:
                return []  # no registration on the way out
            if event.code in TRANSIENT_CODES:
                return self._transition(Registration.REGISTERING, details=event.details)
            return self._refused(f"the coordinator refused this agent ({event.code}): {event.details}")
        if event.call == "Heartbeat":
            if self.beat is Beat.STOPPED:
                return []
            self._expect(self.beat is Beat.IN_FLIGHT, event)
            if forgotten:
                return self._forgotten() + self._transition(Beat.SCHEDULED)
            # Said once, then every BEATS_FAILED_SAID_EVERY beats: a coordinator away for minutes
            # (restarting, without its registry) is not a log line per interval.
            self._beats_failed += 1
            failed = self._beats_failed
            why = ""
            if failed == 1:
                why = (f"heartbeat failed ({event.code}: {event.details}); retrying every "
                       f"{self.heartbeat_interval:g} s until the coordinator answers")
            elif failed % BEATS_FAILED_SAID_EVERY == 0:
                why = f"heartbeat still failing after {failed} tries ({event.code}: {event.details})"
            return self._transition(Beat.SCHEDULED, why=why)
        self._expect(self.work is _ASKING[event.call], event)
        if event.call in ("CompleteShard", "FailShard"):
            # Not asked again: the executor already tried while the coordinator was away
            # (agent.daemon); a shard the coordinator did not hear the end of lapses with its lease.
            self.lease = None
            if event.call == "FailShard":
                return self._next_work()
        if self.stopping:
            return self._transition(Work.STOPPED)
        if forgotten:
            return self._transition(Work.AWAITING_REGISTRATION) + self._forgotten()
        wait = self._work_backoff.next()
        self._work_calls_failed += 1
        said = retry_said(self._work_calls_failed)
        why = "" if said is None else (f"coordinator call failed ({event.code}: {event.details}); "
                                       f"retrying in {wait:.1f} s{said}")
        return self._transition(Work.WAITING, seconds=wait, why=why)

    @_handle.register
    def _(self, event: ValidationLeased) -> list[Instruction]:
        self._work_calls_failed = 0
        return self._transition(Work.VALIDATING, lease=event.lease)

    @_handle.register
    def _(self, event: NothingToValidate) -> list[Instruction]:
        return self._transition(Work.ASKING_SHARD)

    @_handle.register
    def _(self, event: ShardLeased) -> list[Instruction]:
        self._work_calls_failed = 0
        return self._transition(Work.TUNING, lease=event.lease, shard=event.shard)

    @_handle.register
    def _(self, event: NothingToLease) -> list[Instruction]:
        self._expect(self.work is Work.ASKING_SHARD, event)
        self._work_backoff.reset()
        self._work_calls_failed = 0
        asked = 1.0 if event.retry_after is None else event.retry_after
        return self._transition(Work.WAITING, seconds=min(max(asked, 0.0), MAX_RETRY_AFTER_S))

    @_handle.register
    def _(self, event: WaitOver) -> list[Instruction]:
        return self._transition(Work.ASKING_VALIDATION)

    @_handle.register(ShardTuned)
    @_handle.register(ShardFailed)
    def _(self, event: ShardTuned | ShardFailed) -> list[Instruction]:
        self._expect_lease(Work.TUNING, event.lease, event)
        if self.lease_cancelled:
            return self._shard_done()  # told to stop: the coordinator has moved on
        if isinstance(event, ShardTuned):
            call = CompleteShard(self.agent_id, event.lease, event.tasks, event.trials, event.seconds,
                                 event.warm_start)
        else:
            call = FailShard(self.agent_id, event.lease, event.reason, event.tasks)
        return self._transition(Work.CLOSING_SHARD, call=call)

    @_handle.register
    def _(self, event: ShardStopped) -> list[Instruction]:
        self._expect_lease(Work.TUNING, event.lease, event)
        return self._shard_done()

    @_handle.register(ShardCompleted)
    @_handle.register(ShardFailureReported)
    def _(self, event: ShardCompleted | ShardFailureReported) -> list[Instruction]:
        self._expect_lease(Work.CLOSING_SHARD, event.lease, event)
        return self._shard_done()

    @_handle.register
    def _(self, event: ValidationDone) -> list[Instruction]:
        self._expect(self.work is Work.VALIDATING, event)
        return self._next_work()

    @_handle.register
    def _(self, event: ReportAccepted) -> list[Instruction]:
        self._last_report_at = max(self._last_report_at, event.now)
        return []

    @_handle.register
    def _(self, event: ReportRefused) -> list[Instruction]:
        if self.lease != event.lease:
            return []  # a report of another attempt than the one held: nothing of ours to stop
        return self._cancel(event.lease.shard_id, f"attempt {event.lease.attempt} is stale ({event.reason})")

    @_handle.register
    def _(self, event: StopRequested) -> list[Instruction]:
        if self.stopping:
            return []
        self.stopping = True
        out = self._transition(Beat.STOPPED)
        if self.work in (Work.TUNING, Work.CLOSING_SHARD, Work.VALIDATING):
            return out  # ends first (_next_work)
        return out + self._transition(Work.STOPPED)

    # ------------------------------------------------------------------ shared steps

    def _forgotten(self) -> list[Instruction]:
        """Register again under the same id, unless already at it (or on the way out)."""
        if self.stopping or self.registration is not Registration.REGISTERED:
            return []
        return self._transition(Registration.REGISTERING)

    def _cancel(self, shard_id: str, reason: str) -> list[Instruction]:
        if self.lease is None or self.lease.shard_id != shard_id or self.lease_cancelled:
            return []
        self.lease_cancelled = True
        # A shard being closed already ended: nothing left to stop.
        return [CancelShard(self.lease, reason)] if self.work is Work.TUNING else []

    def _shard_done(self) -> list[Instruction]:
        self.lease = None
        return self._next_work()

    def _next_work(self) -> list[Instruction]:
        return self._transition(Work.STOPPED if self.stopping else Work.ASKING_VALIDATION)

    def _refused(self, error: str) -> list[Instruction]:
        out = self._transition(Registration.REFUSED)
        if self.lease is not None and self.work is Work.TUNING and not self.lease_cancelled:
            self.lease_cancelled = True
            out.append(CancelShard(self.lease, error))
        self.stopping = True
        if self.beat is not Beat.STOPPED:
            out += self._transition(Beat.STOPPED)
        return out + self._transition(Work.STOPPED, error=error)

    def _expect(self, expected: bool, event: Event) -> None:
        if not expected:
            raise InvalidTransition(f"{event!r} is not expected by {self!r}")

    def _expect_lease(self, work: Work, lease: Lease, event: Event) -> None:
        self._expect(self.work is work and self.lease == lease, event)

    # ------------------------------------------------------------------ transitions

    def _transition(self, to: State, **details) -> list[Instruction]:
        region = REGION[type(to)]
        current = getattr(self, region)
        enter = self.TRANSITIONS.get((current, to))
        if enter is None:
            raise InvalidTransition(f"{region}: {current.value} -> {to.value} is not a transition ({self!r})")
        setattr(self, region, to)
        out = enter(self, **details)
        self.log.append(Transition(region, current.value, to.value,
                                   None if self.lease is None else self.lease.shard_id, self._stimulus_id,
                                   tuple(type(i).__name__ for i in out)))
        return out

    def _quiet(self) -> list[Instruction]:
        return []

    # Registration
    def _register_first(self) -> list[Instruction]:
        return [Register()]

    def _register_again(self) -> list[Instruction]:
        self._register_backoff.reset()
        self._registers_failed = 0
        return [Register(self.agent_id)]

    def _retry_registration(self, details: str) -> list[Instruction]:
        after = self._register_backoff.next()
        self._registers_failed += 1
        said = retry_said(self._registers_failed)
        why = "" if said is None else f"register: coordinator unavailable ({details}); retrying in {after:.1f} s{said}"
        return [Register(self.agent_id, after, why=why)]

    def _registered(self) -> list[Instruction]:
        self._register_backoff.reset()
        self._registers_failed = 0
        return []

    # Work
    def _start_rpc_server(self) -> list[Instruction]:
        return [StartRPCServer(self.tracker)]

    def _ask_for_validation(self) -> list[Instruction]:
        return [LeaseValidation(self.agent_id)]

    def _ask_for_shard(self) -> list[Instruction]:
        return [LeaseShard(self.agent_id, max_wait=self.lease_wait, timeout=self.lease_wait + 10)]

    def _wait(self, seconds: float, why: str = "") -> list[Instruction]:
        return [Wait(seconds, why)]

    def _start_shard(self, lease: Lease, shard) -> list[Instruction]:
        self.lease, self.lease_cancelled = lease, False
        return [StartShard(lease, shard)]

    def _close_shard(self, call: CompleteShard | FailShard) -> list[Instruction]:
        return [call]

    def _validate(self, lease) -> list[Instruction]:
        return [ValidateLibrary(self.agent_id, lease)]

    def _stop(self, error: str | None = None) -> list[Instruction]:
        return [Shutdown(error)]

    # Beat
    def _schedule_beat(self, why: str = "") -> list[Instruction]:
        return [ScheduleHeartbeat(self.heartbeat_interval, why)]

    def _send_beat(self, leases: tuple[Lease, ...], serving: bool) -> list[Instruction]:
        return [SendHeartbeat(self.agent_id, leases, serving, timeout=max(2.0, self.heartbeat_interval))]

    TRANSITIONS: ClassVar[dict[tuple[State, State], Callable[..., list[Instruction]]]] = {
        (Registration.UNREGISTERED, Registration.REGISTERING): _register_first,
        (Registration.REGISTERING, Registration.REGISTERING): _retry_registration,
        (Registration.REGISTERING, Registration.REGISTERED): _registered,
        (Registration.REGISTERING, Registration.REFUSED): _quiet,
        (Registration.REGISTERED, Registration.REGISTERING): _register_again,

        (Work.NOT_STARTED, Work.STARTING): _quiet,
        (Work.NOT_STARTED, Work.STOPPED): _stop,
        (Work.STARTING, Work.STARTING_RPC_SERVER): _start_rpc_server,
        (Work.STARTING, Work.STOPPED): _stop,
        (Work.STARTING_RPC_SERVER, Work.ASKING_VALIDATION): _ask_for_validation,
        (Work.STARTING_RPC_SERVER, Work.STOPPED): _stop,
        (Work.ASKING_VALIDATION, Work.VALIDATING): _validate,
        (Work.ASKING_VALIDATION, Work.ASKING_SHARD): _ask_for_shard,
        (Work.ASKING_VALIDATION, Work.WAITING): _wait,
        (Work.ASKING_VALIDATION, Work.AWAITING_REGISTRATION): _quiet,
        (Work.ASKING_VALIDATION, Work.STOPPED): _stop,
        (Work.ASKING_SHARD, Work.TUNING): _start_shard,
        (Work.ASKING_SHARD, Work.WAITING): _wait,
        (Work.ASKING_SHARD, Work.AWAITING_REGISTRATION): _quiet,
        (Work.ASKING_SHARD, Work.STOPPED): _stop,
        (Work.WAITING, Work.ASKING_VALIDATION): _ask_for_validation,
        (Work.WAITING, Work.STOPPED): _stop,
        (Work.TUNING, Work.CLOSING_SHARD): _close_shard,
        (Work.TUNING, Work.ASKING_VALIDATION): _ask_for_validation,
        (Work.TUNING, Work.STOPPED): _stop,
        (Work.CLOSING_SHARD, Work.ASKING_VALIDATION): _ask_for_validation,
        (Work.CLOSING_SHARD, Work.WAITING): _wait,
        (Work.CLOSING_SHARD, Work.AWAITING_REGISTRATION): _quiet,
        (Work.CLOSING_SHARD, Work.STOPPED): _stop,
        (Work.VALIDATING, Work.ASKING_VALIDATION): _ask_for_validation,
        (Work.VALIDATING, Work.STOPPED): _stop,
        (Work.AWAITING_REGISTRATION, Work.ASKING_VALIDATION): _ask_for_validation,
        (Work.AWAITING_REGISTRATION, Work.STOPPED): _stop,

        (Beat.OFF, Beat.SCHEDULED): _schedule_beat,
        (Beat.OFF, Beat.STOPPED): _quiet,
        (Beat.SCHEDULED, Beat.SCHEDULED): _schedule_beat,  # a tick with nothing to say: the next one
        (Beat.SCHEDULED, Beat.IN_FLIGHT): _send_beat,
        (Beat.SCHEDULED, Beat.STOPPED): _quiet,
        (Beat.IN_FLIGHT, Beat.SCHEDULED): _schedule_beat,
        (Beat.IN_FLIGHT, Beat.STOPPED): _quiet,
    }
