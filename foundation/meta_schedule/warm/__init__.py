"""Warm starts: what a new search takes from everything the farm has tuned before.

- `structure`: which workloads are the same fused operators at other shapes.
- `seed_sources`: their best stored traces for a job's tasks, this fingerprint's first, then
  the nearest other fingerprints'.
- `transplant`: a donor trace replayed on a task's own design space, checked.
- `seed_round`: the seeds measured first, as the job's own records.
- `cost_models`: an xgb cost model trained on a fingerprint's records, kept in the registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .seed_round import SeedRound, SeedRoundReport
from .seed_sources import SeedTrace, find_seed_traces

# Seeds measured per task: a quarter of its share of the budget, at most this many, so that three
# quarters of a warm task's trials are the search's own at any budget. Seeds are the donors' best
# few; beyond them the search's own candidates are worth more, and seeds that are worse than what
# the search finds alone narrow it around them (issue 53).
MAX_SEEDS_PER_TASK = 8


def seeds_per_task(planned_per_task: int) -> int:
    return max(1, min(MAX_SEEDS_PER_TASK, planned_per_task // 4))


@dataclass
class WarmStart:
    """What a tuning run starts from besides its own workloads' records."""

    seeds: Sequence[Sequence[SeedTrace]] = field(default_factory=list)  # donor traces, per task, best first
    cost_model: Any = None  # an XGBModel trained on this fingerprint's records, or None
    cost_model_sha256: str = ""  # the stored model's, when there is one
    max_seeds_per_task: int = MAX_SEEDS_PER_TASK

    def seeds_per_task(self, planned_per_task: int) -> int:
        return min(self.max_seeds_per_task, seeds_per_task(planned_per_task))


__all__ = ["SeedRound", "SeedRoundReport", "SeedTrace", "WarmStart", "find_seed_traces", "seeds_per_task"]
