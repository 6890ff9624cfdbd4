"""Which of a job's tasks its library compiles untuned, kept with the job for its summary, status and `--json`.

A task is built untuned when its fastest record is its untuned form (measured first by every tuning
run on CPUs, foundation.meta_schedule.untuned_form: no tuned schedule beat it) or when it has no
valid record. Both modes keep the finding in the job's notes (JobNotes.built_untuned, a
foundation.domain.built_untuned.BuiltUntuned), written when the library is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from foundation.domain.built_untuned import BuiltUntuned


def built_untuned(tasks: Sequence[Any], database) -> BuiltUntuned:
    """The job's note for a library built from ``database``'s best records of ``tasks``."""
    from foundation.meta_schedule.untuned_form import tasks_built_untuned

    return BuiltUntuned(tuple(tasks_built_untuned(tasks, database)), len(tasks))


def describe_built_untuned(value: BuiltUntuned | Mapping[str, Any] | None) -> str | None:
    """One line for the summary, of a job's note or of a job document's `built_untuned`; None when every
    task was built tuned (or nothing is known)."""
    if isinstance(value, Mapping):
        value = BuiltUntuned.from_json(dict(value))
    return value.describe() if value is not None else None
