"""MetaSchedule's gradient-based task scheduler, committing each batch as soon as it is measured.

MetaSchedule commits a batch's records (and updates the cost model, and runs every measure
callback) only when it joins the task that measured it, and TVM's `GradientBased` scheduler
joins no task until every task has had its first batch. On a 19-task model with a small
budget that is the whole tune: a `farm submit` killed or interrupted before the end had
measured everything and committed nothing.

`joined_gradient` picks tasks by TVM's rule (one round robin, then the task with the largest
weighted gradient of its best latency, with TVM's alpha and window), but joins every task
whose batch is measured before it picks the next, so records reach the database one batch at
a time. When ``cancelled`` is set it joins what is in flight and ends the tuning: nothing
measured is lost, and nothing more is started. A task given a cap of its own (a reused task's
top-up, foundation.domain.reuse) is terminated once it measured that many: MetaSchedule knows
one per-task cap only.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence

# TVM's defaults for GradientBased (python/tvm/s_tir/meta_schedule/task_scheduler/gradient_based.py).
ALPHA = 0.2
WINDOW_SIZE = 3
# MetaSchedule's latency of a candidate that failed (TaskCleanUp), in ms.
FAILED_MS = 1e9


class LatencyHistory:
    """Each task's best latency after each joined batch, as TVM's scheduler keeps it.

    TVM keeps it in C++ fields Python cannot read; the measure callback of `tuner.tune` feeds
    it the same results instead (`record`).
    """

    def __init__(self, num_tasks: int):
        self._best = [FAILED_MS] * num_tasks
        self.history: list[list[float]] = [[] for _ in range(num_tasks)]
        self.trials = [0] * num_tasks  # candidates joined, failed ones included

    def record(self, task_id: int, builder_results: Sequence, runner_results: Sequence) -> None:
        self.trials[task_id] += len(builder_results)
        for built, ran in zip(builder_results, runner_results):
            self._best[task_id] = min(self._best[task_id], _latency_ms(built, ran))
        self.history[task_id].append(self._best[task_id])

    def gradient(self, task_id: int, weight: float, alpha: float = ALPHA, window: int = WINDOW_SIZE) -> float:
        best_latency = self.history[task_id]
        n = len(best_latency)
        if n == 0 or best_latency[-1] >= FAILED_MS:
            return -1e9  # no valid latency yet: TVM skips such a task while others have one
        best = best_latency[-1]
        g1 = (best_latency[n - 1 - window] - best) / window if n >= 1 + window else 0.0
        g2 = best / n
        return (alpha * g1 + (1 - alpha) * g2) * weight


def _latency_ms(built, ran) -> float:
    if built.error_msg or ran.error_msg or not ran.run_secs:
        return FAILED_MS
    secs = sorted(float(s) for s in ran.run_secs)
    mid = len(secs) // 2
    median = secs[mid] if len(secs) % 2 else (secs[mid - 1] + secs[mid]) / 2
    return median * 1e3


def joined_gradient(history: LatencyHistory, cancelled: threading.Event | None = None, seed: int | None = None,
                    caps: Sequence[int | None] | None = None):
    """A MetaSchedule TaskScheduler (see the module's docstring); ``caps`` holds each task's own
    trial cap, or None where MetaSchedule's per-task cap is the only one."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

    @derived_object
    class _JoinedGradient(PyTaskScheduler):
        def __init__(self):
            super().__init__()
            self.round_robin = 0
            self.rng = random.Random(seed)

        def next_task_id(self) -> int:
            scheduler = self._outer()
            tasks = scheduler.tasks_
            for i in range(len(tasks)):
                scheduler.touch_task(i)  # joins each task whose batch is measured: its records commit
            self._end_capped(scheduler, tasks)
            if cancelled is not None and cancelled.is_set():
                for i, task in enumerate(tasks):
                    if not task.is_terminated and task.runner_futures is not None:
                        scheduler.join_running_task(i)
                return -1
            alive = [i for i, task in enumerate(tasks) if not task.is_terminated]
            if not alive:
                return -1
            while self.round_robin < len(tasks):
                task_id = self.round_robin
                self.round_robin += 1
                if not tasks[task_id].is_terminated:
                    return task_id
            grads = [history.gradient(i, float(tasks[i].task_weight)) for i in alive]
            if max(grads) == min(grads):
                task_id = alive[self.rng.randrange(len(alive))]
            else:
                task_id = alive[grads.index(max(grads))]
            if tasks[task_id].runner_futures is not None:
                scheduler.join_running_task(task_id)
                if self._end_capped(scheduler, tasks):
                    return self.next_task_id()  # the batch just joined used up its cap
            return task_id

        def _end_capped(self, scheduler, tasks) -> bool:
            """Terminate every joined task that measured its own cap; True if any was."""
            ended = False
            for i, task in enumerate(tasks):
                cap = caps[i] if caps is not None else None
                if cap is None or task.is_terminated or task.runner_futures is not None:
                    continue
                if history.trials[i] >= cap:
                    scheduler.terminate_task(i)
                    ended = True
            return ended

    return _JoinedGradient()
