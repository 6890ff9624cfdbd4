"""A shard: some of a job's tuning tasks, leased to one agent at a time; its states and their one
transition table (pure state, no I/O).

What is done with shards lives beside this: splitting a job into them
(foundation.domain.shard_split), their leases (foundation.domain.shard_leases, over the rules
every lease shares, foundation.domain.leases) and what they mean for their job
(foundation.domain.job_rollup).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from foundation.domain.leases import AttemptFailure
from foundation.domain.transitions import IllegalTransition, TransitionTable


class ShardState(str, enum.Enum):
    PENDING = "pending"  # waiting for an agent: new, or re-queued after a failed attempt
    LEASED = "leased"  # an agent tunes it under the current attempt id
    DONE = "done"
    FAILED = "failed"  # every allowed attempt failed
    CANCELLED = "cancelled"  # its job was cancelled, or failed because of another shard

    @property
    def is_final(self) -> bool:
        return TRANSITIONS.is_final(self)


class IllegalShardTransition(IllegalTransition):
    """A shard was asked to move to a state its current state cannot reach."""


TRANSITIONS: TransitionTable[ShardState] = TransitionTable("shard", ShardState, {
    ShardState.PENDING: {ShardState.LEASED, ShardState.CANCELLED},
    # leased -> pending is a re-queue: the attempt failed or its agent went silent.
    ShardState.LEASED: {ShardState.PENDING, ShardState.DONE, ShardState.FAILED, ShardState.CANCELLED},
    ShardState.DONE: set(),
    ShardState.FAILED: set(),
    ShardState.CANCELLED: set(),
}, IllegalShardTransition)

check_transition = TRANSITIONS.check
allowed_sources = TRANSITIONS.allowed_sources


@dataclass(frozen=True)
class Shard:
    """Some of a job's tasks, tuned together by one agent at a time.

    ``attempt`` counts the leases granted so far and is the current lease's attempt id while
    leased; 0 means never leased. ``agent_id`` and ``leased_at`` describe the current (or, once
    done, the last) lease.
    """

    id: str
    job_id: str
    task_names: tuple[str, ...]
    cost: float
    trial_budget: int
    state: ShardState = ShardState.PENDING
    attempt: int = 0
    agent_id: str | None = None
    leased_at: float | None = None
    failures: tuple[AttemptFailure, ...] = ()

    def moved(self, new: ShardState, **changes) -> "Shard":
        """This shard in state ``new`` with ``changes``, if the transition is legal."""
        return replace(self, state=check_transition(self.state, new), **changes)
