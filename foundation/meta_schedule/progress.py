"""Per-task tuning progress, updated live as candidates are built and measured.

MetaSchedule only hands measured batches to its measure callbacks when it joins a task,
after the whole batch. So progress is taken where results appear instead: from the builder
(build errors) and the runner (timings), attributed to the task the scheduler last picked
(it logs each pick, and builds/runs happen right after on the same thread). Results after a
cancel still count: the batch in flight is measured and committed.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from foundation.domain.model_estimate import ModelEstimate
from foundation.domain.model_estimate import model_estimate as estimate
from foundation.domain.trial_plan import TaskDemand

# Errors kept per task: enough to diagnose, bounded for huge runs.
KEPT_ERRORS_PER_TASK = 5

_PICK = re.compile(r"TaskScheduler picks Task #(\d+)")


@dataclass
class TaskProgress:
    """What is known about one task while it is tuned."""

    index: int
    name: str
    weight: int
    flop: float
    budget: int  # the most trials MetaSchedule gives it (its per-task cap)
    planned: int = 0  # its share of the budget, what progress is shown against (0: the cap)
    trials: int = 0
    build_errors: int = 0
    run_errors: int = 0
    best_sec: float | None = None
    started: float | None = None
    last_update: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def best_gflops(self) -> float | None:
        if self.best_sec is None or self.best_sec <= 0 or self.flop <= 0:
            return None
        return self.flop / self.best_sec / 1e9

    @property
    def expected(self) -> int:
        """What the task's bar counts to: its planned trials, or more once it got more."""
        return max(self.planned or self.budget, self.trials)

    @property
    def elapsed(self) -> float:
        if self.started is None:
            return 0.0
        return (self.last_update or time.monotonic()) - self.started

    def to_json(self) -> dict:
        return {
            "task": self.name,
            "weight": self.weight,
            "trials": self.trials,
            "budget": self.budget,
            "build_errors": self.build_errors,
            "run_errors": self.run_errors,
            "best_us": None if self.best_sec is None else self.best_sec * 1e6,
            "best_gflops": self.best_gflops,
            "elapsed_s": round(self.elapsed, 3),
            "errors": list(self.errors),
        }


def estimated_latency(tasks: Sequence[TaskProgress]) -> float | None:
    """The model's latency in seconds as its tasks' best schedules so far predict it (each
    task's best time by its weight, as MetaSchedule's scheduler reckons); None until every
    task has a measurement."""
    if not tasks or any(t.best_sec is None for t in tasks):
        return None
    return sum(t.best_sec * t.weight for t in tasks)


def model_estimate(tasks: Sequence[TaskProgress]) -> ModelEstimate | None:
    """The model's latency from the first measured task on: tasks not measured yet counted at
    their FLOPs at the measured ones' rate, and counted as estimated
    (foundation.domain.model_estimate); None until a task with FLOPs is measured."""
    return estimate([TaskDemand(t.name, t.flop, t.weight, None if t.best_sec is None else t.best_sec * 1e3)
                     for t in tasks])


class ProgressListener(Protocol):
    """Receives tuning progress; implementations draw bars, stream events, count metrics."""

    def started(self, tasks: Sequence[TaskProgress]) -> None: ...

    def measured(self, task: TaskProgress, new_trials: int) -> None: ...

    def batch_measured(self, task: TaskProgress) -> None:
        """Every candidate of the task's latest batch is measured (or failed to build)."""

    def finished(self, tasks: Sequence[TaskProgress]) -> None: ...


class LiveProgress:
    """Attributes build and run results to tasks and tells the listener, thread-safely."""

    def __init__(self, tasks: list[TaskProgress], listener: ProgressListener | None):
        self.tasks = tasks
        self.listener = listener
        self.current: int | None = None
        self._lock = threading.Lock()

    def picked(self, task_id: int) -> None:
        self.current = task_id

    def built(self, results) -> None:
        """Failed builds are finished trials (they never reach the runner)."""
        task_id = self.current
        if task_id is None:
            return
        failed = [r.error_msg for r in results if r.error_msg]
        if failed:
            with self._lock:
                task = self.tasks[task_id]
                task.trials += len(failed)
                task.build_errors += len(failed)
                for message in failed:
                    _keep(task, message)
                task.last_update = time.monotonic()
            self._tell(task_id, len(failed))
        if results and len(failed) == len(results):
            self.batch_measured(task_id)  # nothing of it reaches the runner

    def batch_measured(self, task_id: int | None) -> None:
        if task_id is None or self.listener is None:
            return
        self.listener.batch_measured(self.tasks[task_id])

    def ran(self, task_id: int | None, result) -> None:
        if task_id is None:
            return
        with self._lock:
            task = self.tasks[task_id]
            task.trials += 1
            if result.error_msg:
                task.run_errors += 1
                _keep(task, result.error_msg)
            elif result.run_secs:
                secs = [float(s) for s in result.run_secs]
                mean = sum(secs) / len(secs)
                if math.isfinite(mean) and (task.best_sec is None or mean < task.best_sec):
                    task.best_sec = mean
            task.last_update = time.monotonic()
        self._tell(task_id, 1)

    def _tell(self, task_id: int, new_trials: int) -> None:
        if self.listener is not None:
            self.listener.measured(self.tasks[task_id], new_trials)


class TaskPickHandler(logging.Handler):
    """Reads MetaSchedule's "TaskScheduler picks Task #N" log line into LiveProgress."""

    def __init__(self, live: LiveProgress):
        super().__init__(level=logging.INFO)
        self.live = live

    def emit(self, record: logging.LogRecord) -> None:
        match = _PICK.search(record.getMessage())
        if match:
            self.live.picked(int(match.group(1)))


def _keep(task: TaskProgress, message: str) -> None:
    if len(task.errors) < KEPT_ERRORS_PER_TASK:
        lines = [line for line in message.strip().splitlines() if line.strip()]
        task.errors.append((lines[-1] if lines else message)[:500])
