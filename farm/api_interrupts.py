"""Ctrl-C in a Python caller of farm.submit: a cancel of the job it runs here, then the caller's KeyboardInterrupt.

Python raises KeyboardInterrupt wherever the main thread is, which during a submit is inside a TVM
call: TVM's FFI hands it back as a RuntimeError and the job was recorded "failed: RuntimeError".
So while an embedded job runs, SIGINT is taken as `farm submit` takes it (farm.cli.interrupts):
the tuner stops after the batch in flight, the job ends cancelled with its records kept, and only
then is KeyboardInterrupt raised, to the caller, saying what became of the job. A second Ctrl-C
stops the process at once, as it stops `farm submit`. Where the caller set its own SIGINT handler,
or calls from another thread (Python delivers signals to the main thread only), nothing changes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from farm.cli.interrupts import cancel_on_signals
from foundation.errors import Interrupted
from foundation.job_driver.cancellation import Cancellation
from foundation.processes.native_stderr import terminal_stderr


@dataclass
class CtrlC:
    """What a submit under ``ctrl_c_cancels`` hands the job driver (``cancellation``, None where
    Ctrl-C is left as it was) and tells back (``ended``: the job it ran or answered with)."""

    cancellation: Cancellation | None
    job: object | None = None  # the registry's Job: its id and state

    def ended(self, job) -> None:
        self.job = job


@contextmanager
def ctrl_c_cancels() -> Iterator[CtrlC]:
    """Ctrl-C while the block runs a job requests its cancellation; KeyboardInterrupt out of the
    block once it did, naming the job and how it ended."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield CtrlC(None)
        return
    # Opened now, on the caller's stderr: while tuning, fd 2 points at the job's log.
    terminal = terminal_stderr()

    def notify(line: str) -> None:
        terminal.write(f"farm.submit: {line}\n")

    try:
        with cancel_on_signals(notify, signals=(signal.SIGINT,), exiting=False) as cancellation:
            ctrl_c = CtrlC(cancellation)
            try:
                yield ctrl_c
            except Interrupted:  # cancelled before a job existed
                if cancellation.signum is None:
                    raise
        if cancellation.signum is not None:
            raise KeyboardInterrupt(_what_became_of(ctrl_c.job, cancellation.reason))
    finally:
        terminal.close()


def _what_became_of(job, reason: str | None) -> str:
    if job is None:
        return f"{reason} before any job started: nothing was written"
    if job.state == "cancelled":
        return (f"{reason}: job {job.id} was cancelled, its measured records kept (farm.status({job.id!r}) "
                "shows it; the same submit continues from them)")
    return f"{reason}: job {job.id} had already ended {job.state} (farm.status({job.id!r}) shows it)"
