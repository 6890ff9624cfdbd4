"""The warm-start seeds a distributed job's plan chose (its notes' `warm_seeds`): for each task it tunes, the
registry ids of its donor records, best first, and how many a task may measure; its shards' leases send them
(coordinator.calls.shards)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class WarmSeeds:
    max_per_task: int  # 0: no warm start
    tasks: dict[str, tuple[int, ...]] = field(default_factory=dict)  # by task name; a task without seeds is absent

    def of(self, task: str) -> list[int]:
        return list(self.tasks.get(task, ()))

    def to_json(self) -> dict[str, Any]:
        return {"max_per_task": self.max_per_task, "tasks": {name: list(ids) for name, ids in self.tasks.items()}}

    @staticmethod
    def from_json(value: dict[str, Any]) -> "WarmSeeds":
        """Its `to_json`, read strictly: KeyError for a field missing, ValueError for one unknown."""
        if set(value) - {"max_per_task", "tasks"}:
            raise ValueError(f"warm_seeds holds {', '.join(sorted(set(value) - {'max_per_task', 'tasks'}))}")
        return WarmSeeds(int(value["max_per_task"]),
                         {str(name): tuple(int(i) for i in ids) for name, ids in value["tasks"].items()})
