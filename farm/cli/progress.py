"""Live tuning progress on the terminal: a bar per task and a total, or one line per measured batch.

It writes to the terminal's stderr as it was when the command started (`terminal_console`):
while tuning, fd 2 itself carries TVM's C++ warnings to the job's log file
(foundation.processes.native_stderr), and nothing but the bars reaches the screen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from farm.cli.units import rate, seconds_short
from foundation.meta_schedule.progress import ProgressListener, TaskProgress, model_estimate
from foundation.units import duration

NAME_WIDTH = 40
STATE_WIDTH = 10


def _best(task: TaskProgress) -> str:
    if task.best_sec is None:
        return "best -"
    text = f"best {duration(task.best_sec)}"
    if task.best_gflops is not None:
        text += f"  {task.best_gflops:,.1f} GFLOP/s"
    return text


def _errors(tasks: Sequence[TaskProgress]) -> str:
    errors = sum(t.build_errors + t.run_errors for t in tasks)
    return f"{errors} errors" if errors else ""


def _total(tasks: Sequence[TaskProgress], began: float) -> str:
    """The model as the best schedules so far predict it, and the pace."""
    estimate = model_estimate(tasks)
    measured = sum(1 for t in tasks if t.best_sec is not None)
    if estimate is None:
        model = f"model - ({measured}/{len(tasks)} tasks measured)"
    elif estimate.measured:
        model = f"model ~{duration(estimate.seconds)}"
    else:  # the tasks not measured yet at the measured ones' FLOP rate
        model = f"model ~{duration(estimate.seconds)} ({estimate.estimated_tasks}/{len(tasks)} tasks estimated)"
    return f"{model}  {rate(sum(t.trials for t in tasks), time.monotonic() - began)}"


class ConsoleProgress(ProgressListener):
    """A JobObserver: stage lines, and per-task progress as rich's live bars on a terminal or
    as plain lines (one per task per measured batch) elsewhere."""

    def __init__(self, console=None):
        from farm.cli.output import terminal_console

        self.console = console or terminal_console()
        self.live = self.console.is_terminal
        self.begin = time.monotonic()
        self.tuning_began = self.begin
        self._progress = None
        self._rows: dict[int, int] = {}
        self._total_row: int | None = None
        self._tasks: list[TaskProgress] = []
        self._printed: dict[int, int] = {}  # task index -> trials its last plain line showed
        self._lock = threading.Lock()

    def stage(self, state: str, detail: str) -> None:
        self.console.print(f"[{seconds_short(time.monotonic() - self.begin)}] {state:<{STATE_WIDTH}} {detail}")

    def planned(self, plan: dict) -> None:
        """The trial plan (TrialPlan.to_json), before tuning starts."""
        from farm.cli.views import plan_lines

        first, *rest = plan_lines(plan)
        self.stage("planned", first)
        indent = len(f"[{seconds_short(0.0)}] {'':<{STATE_WIDTH}} ")  # under the stage line's detail
        for line in rest:
            self.console.print(" " * indent + line)

    def started(self, tasks: Sequence[TaskProgress]) -> None:
        self._tasks = list(tasks)
        self.tuning_began = time.monotonic()
        if not self.live:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn(f"{{task.description:<{NAME_WIDTH}}}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"),
            TextColumn("[red]{task.fields[errors]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        # Every row exists before the first frame is drawn: no half-empty frame is left behind.
        for task in tasks:
            self._rows[task.index] = self._progress.add_task(task.name[:NAME_WIDTH], total=task.expected,
                                                             best="best -", errors="")
        self._total_row = self._progress.add_task(
            "total", total=sum(t.expected for t in tasks), best=_total(tasks, self.tuning_began), errors="")
        self._progress.start()

    def measured(self, task: TaskProgress, new_trials: int) -> None:
        if self._progress is None:
            return
        self._progress.update(self._rows[task.index], completed=task.trials, total=task.expected,
                              best=_best(task), errors=_errors([task]))
        self._progress.update(self._total_row, completed=sum(t.trials for t in self._tasks),
                              total=sum(t.expected for t in self._tasks), best=_total(self._tasks, self.tuning_began),
                              errors=_errors(self._tasks))

    def batch_measured(self, task: TaskProgress) -> None:
        if not self.live:
            self._line(task)

    def finished(self, tasks: Sequence[TaskProgress]) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            return
        for task in tasks:  # what a batch cut short (cancelled) left unsaid
            self._line(task)
        self.console.print(f"[{seconds_short(time.monotonic() - self.begin)}] tuned      "
                           f"{sum(t.trials for t in tasks)} trials over {len(tasks)} tasks: "
                           f"{_total(tasks, self.tuning_began)}")

    def _line(self, task: TaskProgress) -> None:
        with self._lock:
            if self._printed.get(task.index) == task.trials or not task.trials:
                return
            self._printed[task.index] = task.trials
        errors = _errors([task])
        self.console.print(
            f"[{seconds_short(time.monotonic() - self.begin)}] tune       {task.name[:NAME_WIDTH]:<{NAME_WIDTH}} "
            f"{task.trials:>4}/{task.expected:<4} {_best(task)}" + (f"  {errors}" if errors else ""))
