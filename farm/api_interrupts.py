"""Ctrl-C in a Python caller of farm.submit: a cancel of the job it runs here, then the caller's KeyboardInterrupt.

Python raises KeyboardInterrupt wherever the main thread is, which during a submit is inside a TVM
call: TVM's FFI hands it back as a RuntimeError and the job was recorded "failed: RuntimeError".
So while an embedded job runs, SIGINT is taken as `farm submit` takes it (farm.cli.interrupts):
the tuner stops after the batch in flight, the job ends cancelled with its records kept, and only
then is KeyboardInterrupt raised, to the caller. A second Ctrl-C stops the process at once, as it
stops `farm submit`. Where the caller set its own SIGINT handler, or calls from another thread
(Python delivers signals to the main thread only), nothing changes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from farm.cli.interrupts import cancel_on_signals
from foundation.errors import Interrupted
from foundation.job_driver.cancellation import Cancellation
from foundation.processes.native_stderr import terminal_stderr


@contextmanager
def ctrl_c_cancels() -> Iterator[Cancellation | None]:
    """The Cancellation Ctrl-C requests while the block runs a job (None where Python's default does
    not apply); KeyboardInterrupt out of the block once it did."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield None
        return
    # Opened now, on the caller's stderr: while tuning, fd 2 points at the job's log.
    terminal = terminal_stderr()

    def notify(line: str) -> None:
        terminal.write(f"farm.submit: {line}\n")

    try:
        with cancel_on_signals(notify, signals=(signal.SIGINT,), exiting=False) as cancellation:
            try:
                yield cancellation
            except Interrupted:  # cancelled before a job existed
                if cancellation.signum is None:
                    raise
        if cancellation.signum is not None:
            raise KeyboardInterrupt(f"{cancellation.reason}: the job was cancelled, its measured records kept "
                                    "(farm.jobs() lists it; the same submit continues from them)")
    finally:
        terminal.close()
