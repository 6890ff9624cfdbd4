"""Live tuning progress on stderr: a bar per task on a terminal, log lines otherwise."""

from __future__ import annotations

import time
from collections.abc import Sequence

from foundation.meta_schedule.progress import TaskProgress


def _best(task: TaskProgress) -> str:
    if task.best_sec is None:
        return "best -"
    us = task.best_sec * 1e6
    text = f"best {us:,.1f} us" if us < 10_000 else f"best {us / 1e3:,.2f} ms"
    if task.best_gflops is not None:
        text += f"  {task.best_gflops:,.1f} GFLOP/s"
    return text


class ConsoleProgress:
    """A JobObserver drawing one progress bar per tuning task (rich), or plain lines."""

    def __init__(self, console=None):
        from farm.cli.output import stderr_console

        self.console = console or stderr_console()
        self.live = self.console.is_terminal
        self.begin = time.monotonic()
        self._progress = None
        self._rows: dict[int, int] = {}

    def stage(self, state: str, detail: str) -> None:
        self.console.print(f"[{time.monotonic() - self.begin:7.1f}s] {state:<10} {detail}")

    def started(self, tasks: Sequence[TaskProgress]) -> None:
        if not self.live:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description:<40}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"),
            TextColumn("[red]{task.fields[errors]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._progress.start()
        for task in tasks:
            self._rows[task.index] = self._progress.add_task(
                task.name[:40], total=task.budget, best="best -", errors=""
            )

    def measured(self, task: TaskProgress, new_trials: int) -> None:
        errors = task.build_errors + task.run_errors
        if self._progress is not None:
            self._progress.update(
                self._rows[task.index], completed=min(task.trials, task.budget), best=_best(task),
                errors=f"{errors} errors" if errors else "",
            )
            return
        if new_trials:
            self.console.print(
                f"[{time.monotonic() - self.begin:7.1f}s] tune       {task.name[:40]:<40} "
                f"{task.trials:>4}/{task.budget:<4} {_best(task)}" + (f"  {errors} errors" if errors else "")
            )

    def finished(self, tasks: Sequence[TaskProgress]) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
