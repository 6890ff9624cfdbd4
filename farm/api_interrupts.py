"""Ctrl-C in a Python caller of farm.submit: a cancel of the job it runs here, then the caller's KeyboardInterrupt.

Python raises KeyboardInterrupt wherever the main thread is, which during a submit is inside a TVM
call: TVM's FFI hands it back as a RuntimeError and the job was recorded "failed: RuntimeError".
So while an embedded job runs, SIGINT is taken as `farm submit` takes it (farm.cli.interrupts):
the tuner stops after the batch in flight, the job ends cancelled with its records kept, and only
then is KeyboardInterrupt raised, to the caller, saying what became of the job. A second Ctrl-C
stops the process at once, as it stops `farm submit`. Where the caller set its own SIGINT handler,
or calls from another thread (Python delivers signals to the main thread only), nothing changes.

A submit with wait=False runs in a background thread, which cannot outlive its process. When the
process exits (its script ended, or Ctrl-C ended it), its running submits are cancelled as
``handle.cancel()`` cancels them, and the exit waits for them to end cancelled: otherwise the exit
waited for the whole tune (Python joins the tuner's pool threads at exit), and a submit still
planning was cut off, its job left running, later marked failed. Ctrl-C during that wait exits at once.
"""

from __future__ import annotations

import os
import signal
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from farm.cli.interrupts import LAST_WORDS_S, cancel_on_signals
from foundation.domain.jobs import JobState
from foundation.errors import Interrupted
from foundation.job_driver.cancellation import Cancellation
from foundation.processes.native_stderr import terminal_stderr

if TYPE_CHECKING:  # pragma: no cover
    from farm.submit_handle import SubmitHandle


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
    if job.state is JobState.CANCELLED:
        return (f"{reason}: job {job.id} was cancelled, its measured records kept (farm.status({job.id!r}) "
                "shows it; the same submit continues from them)")
    return f"{reason}: job {job.id} had already ended {job.state} (farm.status({job.id!r}) shows it)"


_background: "weakref.WeakSet[SubmitHandle]" = weakref.WeakSet()
_exit_hook = threading.Lock()
_terminal = None  # the caller's stderr, opened once: while tuning, fd 2 points at the job's log
_exiting: "list[SubmitHandle]" = []  # the submits the exit waits for


def cancelled_at_exit(handle: "SubmitHandle") -> "SubmitHandle":
    """``handle``, whose job is cancelled if the process exits while it runs."""
    global _terminal
    with _exit_hook:
        if _terminal is None:
            # concurrent.futures joins its pools' threads at exit, the tuner's among them, in a hook
            # it registers when imported; hooks run last registered first, so it is imported first.
            import concurrent.futures.thread  # noqa: F401

            _terminal = terminal_stderr()
            threading._register_atexit(_cancel_background)  # type: ignore[attr-defined]
        _background.add(handle)
    return handle


def _cancel_background() -> None:
    running = [handle for handle in list(_background) if not handle.done]
    if not running:
        return
    _exiting.extend(running)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _exit_now)
    for handle in running:
        job = handle.job_id(0) or "its job (not started yet)"
        _terminal.write(f"farm.submit: the process is exiting: {job} stops after the batch in flight, its records "
                        "kept (Ctrl-C stops at once)\n")
        handle.cancel("its process exited")
    for handle in running:
        try:
            handle.wait()
        except Exception:  # the job's own failure: it is recorded with the job
            pass


def _exit_now(signum, frame) -> None:
    _terminal.write("error: SIGINT while exiting: stopped at once (the records measured so far are kept)\n")
    _terminal.flush()
    for handle in _exiting:
        handle.abandon(LAST_WORDS_S)
    os._exit(128 + signum)
