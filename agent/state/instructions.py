"""What the agent's state machine asks to be done: the instructions it returns.

The executor (agent.daemon, or a fake agent) carries each out with gRPC calls, threads and
timers, and hands what came of it back as an event (agent.state.events). A ``why`` is a line
for the executor's log: the machine decided something worth a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.state.events import Lease


class Instruction:
    """Something the agent's state machine asks its executor to do."""


@dataclass(frozen=True)
class Register(Instruction):
    """Call Register, after waiting ``after`` seconds (a retry). Answer: Registered or CallFailed."""

    previous_agent_id: str = ""
    after: float = 0.0
    why: str = ""


@dataclass(frozen=True)
class StartRPCServer(Instruction):
    """Start this box's TVM RPC server under ``tracker``. Answer: RPCServerStarted."""

    tracker: Any = None


@dataclass(frozen=True)
class ScheduleHeartbeat(Instruction):
    """In ``seconds``, hand the machine a HeartbeatTick."""

    seconds: float
    why: str = ""


@dataclass(frozen=True)
class SendHeartbeat(Instruction):
    """Call Heartbeat listing ``leases``. Answer: HeartbeatAnswered or CallFailed."""

    agent_id: str
    leases: tuple[Lease, ...]
    rpc_server_serving: bool
    timeout: float


@dataclass(frozen=True)
class LeaseValidation(Instruction):
    """Call LeaseValidation. Answer: ValidationLeased, NothingToValidate or CallFailed."""

    agent_id: str


@dataclass(frozen=True)
class LeaseShard(Instruction):
    """Call LeaseShard, held up to ``max_wait`` seconds by the coordinator (0: not held); cancel
    it if the agent is stopped meanwhile. Answer: ShardLeased, NothingToLease or CallFailed."""

    agent_id: str
    max_wait: float
    timeout: float


@dataclass(frozen=True)
class Wait(Instruction):
    """In ``seconds``, hand the machine a WaitOver."""

    seconds: float
    why: str = ""


@dataclass(frozen=True)
class StartShard(Instruction):
    """Tune the leased shard. Answer: ShardTuned, ShardFailed or (once cancelled) ShardStopped;
    meanwhile ReportAccepted and ReportRefused as its records are reported."""

    lease: Lease
    shard: Any = None


@dataclass(frozen=True)
class CancelShard(Instruction):
    """Stop tuning ``lease`` as soon as possible."""

    lease: Lease
    reason: str


@dataclass(frozen=True)
class CompleteShard(Instruction):
    """Call CompleteShard. Answer: ShardCompleted or CallFailed."""

    agent_id: str
    lease: Lease
    tasks: tuple = ()
    trials: int = 0
    seconds: float = 0.0
    warm_start: object = None


@dataclass(frozen=True)
class FailShard(Instruction):
    """Call FailShard. Answer: ShardFailureReported or CallFailed."""

    agent_id: str
    lease: Lease
    reason: str
    tasks: tuple = ()


@dataclass(frozen=True)
class ValidateLibrary(Instruction):
    """Validate and time the leased library, report it. Answer: ValidationDone."""

    agent_id: str
    lease: Any = None


@dataclass(frozen=True)
class Shutdown(Instruction):
    """Release what the agent holds and end; ``error``: why the agent cannot go on."""

    error: str | None = None
