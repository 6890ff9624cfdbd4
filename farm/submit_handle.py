"""An embedded submit running in a background thread of this process: `farm.submit(..., wait=False)`.

The job runs as `farm.submit` runs it (one at a time per process, under the TVM IR lock); the
handle hands out what the CLI draws, as events: the job's stages (``stage``: its state and a
line on it), the trial plan (``planned``) and each task's tuning progress (``started``,
``measured``, ``batch_measured``, ``finished``: a snapshot of the task's numbers). ``wait``
returns the job however it ended; ``cancel`` asks it to stop after the batch in flight, as
`farm cancel` does.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from foundation.errors import TimedOut
from foundation.job_driver.cancellation import Cancellation

if TYPE_CHECKING:  # pragma: no cover
    from farm.submit_values import SubmitRequest


@dataclass(frozen=True)
class SubmitEvent:
    """One thing a running submit said: ``kind`` is stage, job, planned, started, measured,
    batch_measured or finished; ``detail`` its line (stage) and ``data`` its numbers."""

    kind: str
    state: str = ""
    detail: str = ""
    data: Any = field(default=None)


_END = object()
# How often a caller's wait wakes, to let a Ctrl-C through.
WAKE_S = 0.2


class SubmitHandle:
    """A submit running in the background; its events, its job, and a way to stop it."""

    def __init__(self, request: "SubmitRequest", job_of: Callable[[str], Any]):
        """``job_of``: the job (a farm.Job) as `farm.status` gives it, by id; farm.job_api hands it in,
        so that this module does not import it back."""
        self._request = request
        self._job_of = job_of
        self._events: queue.Queue = queue.Queue()
        self._cancellation = Cancellation()
        self._job_known = threading.Event()
        # Set when the submit ends. Not the thread's is_alive(): after a join that Ctrl-C interrupted,
        # CPython (3.11 here) takes the running thread for stopped.
        self._ended = threading.Event()
        self._job_id: str | None = None
        self._result = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="farm-submit", daemon=True)
        self._thread.start()

    # -- what a caller uses -----------------------------------------------------------

    def job_id(self, timeout: float | None = None) -> str | None:
        """The job's id once the registry has it (a hit's, or the tuning job's), waiting up to
        ``timeout`` seconds for it; None if the submit ended before any job (bad input, say)."""
        _wait_for(self._job_known, timeout)
        return self._job_id

    @property
    def done(self) -> bool:
        return self._ended.is_set()

    def events(self) -> Iterator[SubmitEvent]:
        """Every event, as it happens, until the submit ends (then the iteration stops)."""
        while True:
            try:
                event = self._events.get(timeout=WAKE_S)
            except queue.Empty:  # a moment for Ctrl-C (_wait_for)
                continue
            if event is _END:
                self._events.put(_END)  # a second iteration ends at once too
                return
            yield event

    def wait(self, timeout: float | None = None) -> Any:
        """The job as it ended (a farm.Job); TimedOut if it runs past ``timeout`` seconds (it goes on), and
        the submit's own error (BadInput, say) if it raised one."""
        if not _wait_for(self._ended, timeout):
            raise TimedOut(f"the submit of {self._request.model} is still running after {timeout:g} s",
                           "wait again, or cancel() it")
        if self._error is not None:
            raise self._error
        return self._job_of(self._result.job.id)

    def cancel(self, reason: str = "cancelled by its caller") -> None:
        """Stop the job after the batch in flight; it ends cancelled with its records kept."""
        self._cancellation.request(reason)

    def abandon(self, timeout: float) -> None:
        """The process exits now, the job's thread with it: mark the job cancelled, giving up after
        ``timeout`` seconds (then its next reader marks it failed, its runner gone)."""
        self._cancellation.abandon(timeout)

    # -- the job's observer (farm.submit_values.JobObserver) --------------------------------

    def stage(self, state: str, detail: str) -> None:
        self._events.put(SubmitEvent("stage", state, detail))

    def job_started(self, job_id: str) -> None:
        self._job_id = job_id
        self._job_known.set()
        self._events.put(SubmitEvent("job", detail=job_id))

    def planned(self, plan: dict) -> None:
        self._events.put(SubmitEvent("planned", data=plan))

    def started(self, tasks) -> None:
        self._events.put(SubmitEvent("started", data=[_snapshot(t) for t in tasks]))

    def measured(self, task, new_trials: int) -> None:
        self._events.put(SubmitEvent("measured", data={**_snapshot(task), "new_trials": new_trials}))

    def batch_measured(self, task) -> None:
        self._events.put(SubmitEvent("batch_measured", data=_snapshot(task)))

    def finished(self, tasks) -> None:
        self._events.put(SubmitEvent("finished", data=[_snapshot(t) for t in tasks]))

    def _run(self) -> None:
        from farm.embedded import submit as submit_job
        from foundation.processes.native_stderr import process_stderr_kept

        try:
            # The caller's stderr stays the caller's while the job tunes: only its workers write to its log.
            with process_stderr_kept():
                self._result = submit_job(self._request, observer=self, cancellation=self._cancellation)
            if self._job_id is None:  # a registry hit: its job exists only once answered
                self.job_started(self._result.job.id)
        except BaseException as err:  # handed to wait(): this thread has no caller to raise to
            self._error = err
        finally:
            self._job_known.set()
            self._ended.set()
            self._events.put(_END)


def _wait_for(event: threading.Event, timeout: float | None) -> bool:
    """``event.wait(timeout)`` in steps of WAKE_S: the signal of a Ctrl-C may reach any thread of the
    process, and the main thread runs Python's handler (KeyboardInterrupt) only once it wakes, which a
    wait without a timeout does when the submit ends."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not event.is_set():
        left = WAKE_S if deadline is None else min(WAKE_S, deadline - time.monotonic())
        if left <= 0:
            return False
        event.wait(left)
    return True


def _snapshot(task) -> dict:
    """A task's progress as plain numbers, copied: the tuner goes on changing its own."""
    data = dataclasses.asdict(task) if dataclasses.is_dataclass(task) else dict(vars(task))
    data.pop("errors", None)
    return data
