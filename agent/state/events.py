"""What can happen to an agent: the events its state machine (agent.state.machine) takes.

Each is a plain value. Whatever carries out the machine's instructions (agent.daemon, or a fake
agent with fake I/O) turns what happened into one of these and hands it to the machine. Times
are monotonic seconds the caller read; the machine has no clock. Payloads the machine only
passes on (a leased shard, a validation lease, a tracker address) are opaque to it.

Every event carries a ``stimulus_id`` (after dask's worker state machine): the machine's log
files each change of state under the id of the event that caused it, so `AgentState.story`
tells why a state was reached. The caller may name it (the call whose answer it is, say);
left out, the event names itself: its kind and a number, unique in this process. It takes no
part in comparing events.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Literal

# The FarmAgent calls whose failures the machine decides about (CallFailed.call).
Call = Literal["Register", "Heartbeat", "LeaseValidation", "LeaseShard", "CompleteShard", "FailShard"]


@dataclass(frozen=True)
class Lease:
    """A shard lease as the agent holds it: what heartbeats list and cancellations name."""

    job_id: str
    shard_id: str
    attempt: int


# Numbers the events that name themselves (a counter, not a clock: the machine has none).
_numbers = itertools.count(1)


@dataclass(frozen=True)
class Event:
    """Something that happened to the agent."""

    stimulus_id: str = field(default="", kw_only=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.stimulus_id:
            object.__setattr__(self, "stimulus_id", f"{type(self).__name__}-{next(_numbers)}")


@dataclass(frozen=True)
class AgentStarted(Event):
    """The agent process is up: it registers."""


@dataclass(frozen=True)
class Registered(Event):
    """The coordinator answered a Register."""

    agent_id: str
    heartbeat_interval: float  # seconds, as the coordinator asked
    tracker: Any = None  # where this box's RPC server registers and measurements go (opaque)


@dataclass(frozen=True)
class RPCServerStarted(Event):
    """This box's TVM RPC server was started (serving or still trying: its watchdog goes on)."""


@dataclass(frozen=True)
class HeartbeatTick(Event):
    """A heartbeat fell due, as the machine scheduled (ScheduleHeartbeat)."""

    now: float
    rpc_server_serving: bool = False


# What a heartbeat's answer may tell the agent (HeartbeatAnswered.orders).
@dataclass(frozen=True)
class CancelLeaseOrder:
    lease: Lease
    reason: str


@dataclass(frozen=True)
class ReRegisterOrder:
    reason: str


@dataclass(frozen=True)
class HeartbeatIntervalOrder:
    seconds: float


@dataclass(frozen=True)
class HeartbeatAnswered(Event):
    orders: tuple[CancelLeaseOrder | ReRegisterOrder | HeartbeatIntervalOrder, ...] = ()


@dataclass(frozen=True)
class CoordinatorForgotUs(Event):
    """The coordinator no longer knows this agent (it restarted on an empty memory, say)."""

    reason: str = ""


@dataclass(frozen=True)
class CallFailed(Event):
    """A call to the coordinator failed with a gRPC status ``code`` (its name, e.g. "UNAVAILABLE")."""

    call: Call
    code: str
    details: str = ""


@dataclass(frozen=True)
class ValidationLeased(Event):
    lease: Any  # the validation lease, passed on to ValidateLibrary


@dataclass(frozen=True)
class NothingToValidate(Event):
    pass


@dataclass(frozen=True)
class ShardLeased(Event):
    lease: Lease
    shard: Any = None  # the shard (tasks, budget, ...), passed on to StartShard


@dataclass(frozen=True)
class NothingToLease(Event):
    retry_after: float | None = None  # seconds the coordinator asked for; None: it did not say


@dataclass(frozen=True)
class WaitOver(Event):
    """The work loop's Wait is over."""


@dataclass(frozen=True)
class ShardTuned(Event):
    """A shard's tuning ran to its end; what CompleteShard says comes with it."""

    lease: Lease
    tasks: tuple = ()  # per-task summaries (opaque)
    trials: int = 0
    seconds: float = 0.0
    warm_start: object = None  # what the search started from (opaque: a WarmStartUse)


@dataclass(frozen=True)
class ShardFailed(Event):
    lease: Lease
    reason: str
    tasks: tuple = ()


@dataclass(frozen=True)
class ShardStopped(Event):
    """A shard's tuning stopped early, as it was told (CancelShard)."""

    lease: Lease


@dataclass(frozen=True)
class ShardCompleted(Event):
    """The coordinator answered the CompleteShard of ``lease`` (accepted or not)."""

    lease: Lease


@dataclass(frozen=True)
class ShardFailureReported(Event):
    """The FailShard of ``lease`` was answered."""

    lease: Lease


@dataclass(frozen=True)
class ValidationDone(Event):
    """A validation lease was worked and its report sent (or given up on)."""


@dataclass(frozen=True)
class ReportAccepted(Event):
    """A ReportRecords was accepted: the coordinator counts it as a sign of life."""

    now: float


@dataclass(frozen=True)
class ReportRefused(Event):
    """A ReportRecords under ``lease`` was refused: another attempt owns the shard now."""

    lease: Lease
    reason: str


@dataclass(frozen=True)
class StopRequested(Event):
    """SIGTERM or Ctrl-C: no new work; a shard or validation under way ends first."""
