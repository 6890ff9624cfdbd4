"""What a job's shards mean for the job: still tuning, ready to build, failed or cancelled (pure, no I/O)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from foundation.domain.shards import Shard, ShardState


class JobOutcome(str, enum.Enum):
    TUNING = "tuning"  # some shard is pending or leased
    READY_TO_BUILD = "ready_to_build"  # every shard is done
    FAILED = "failed"  # some shard failed for good
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class JobRollup:
    outcome: JobOutcome
    counts: Mapping[ShardState, int]
    failed: tuple[Shard, ...]
    error: str | None  # for FAILED: which shards failed, and each attempt's reason

    @property
    def is_final(self) -> bool:
        return self.outcome is not JobOutcome.TUNING


def rollup(shards: Iterable[Shard]) -> JobRollup:
    """The job-level meaning of its shards' states.

    A failed shard fails the job even while others still run: the model cannot be built
    without every task tuned, so the caller cancels the rest (`cancel_unfinished`). A job with
    no tunable task is ready to build at once.
    """
    shards = sorted(shards, key=lambda s: s.id)
    counts = dict.fromkeys(ShardState, 0)
    for shard in shards:
        counts[shard.state] += 1
    failed = tuple(shard for shard in shards if shard.state is ShardState.FAILED)
    if failed:
        return JobRollup(JobOutcome.FAILED, counts, failed, _failure_message(failed, len(shards)))
    if counts[ShardState.CANCELLED]:
        outcome = JobOutcome.CANCELLED
    elif counts[ShardState.DONE] == len(shards):
        outcome = JobOutcome.READY_TO_BUILD
    else:
        outcome = JobOutcome.TUNING
    return JobRollup(outcome, counts, (), None)


def _failure_message(failed: Sequence[Shard], total: int) -> str:
    parts = []
    for shard in failed:
        attempts = "; ".join(
            f"attempt {f.attempt}" + (f" on {f.agent_id}" if f.agent_id else "") + f": {f.reason}"
            for f in shard.failures
        )
        parts.append(
            f"shard {shard.id} (tasks {', '.join(shard.task_names)}) failed after "
            f"{len(shard.failures)} attempts: {attempts}"
        )
    return f"{len(failed)} of {total} shards failed. " + " | ".join(parts)
