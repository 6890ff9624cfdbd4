"""Which of a job's tasks its library compiles untuned (its notes' `built_untuned`), kept for its summary,
status and `--json`: a task whose fastest record is its untuned form, or that has no valid record
(foundation.job_driver.built_untuned finds them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BuiltUntuned:
    tasks: tuple[str, ...]  # the names of the tasks built untuned
    of: int  # the model's tasks

    def to_json(self) -> dict[str, Any]:
        return {"tasks": list(self.tasks), "of": self.of}

    @staticmethod
    def from_json(value: dict[str, Any]) -> "BuiltUntuned":
        """Its `to_json`, read strictly: KeyError for a field missing, ValueError for one unknown."""
        if set(value) - {"tasks", "of"}:
            raise ValueError(f"built_untuned holds {', '.join(sorted(set(value) - {'tasks', 'of'}))}")
        return BuiltUntuned(tuple(str(name) for name in value["tasks"]), int(value["of"]))

    def describe(self) -> str | None:
        """One line for the summary; None when every task was built tuned."""
        if not self.tasks:
            return None
        shown = ", ".join(self.tasks[:6]) + (f" and {len(self.tasks) - 6} more" if len(self.tasks) > 6 else "")
        return (f"{len(self.tasks)} of {self.of} tasks built untuned (their untuned form timed fastest, "
                f"or they have no record): {shown}")
