"""A request to stop a running job: from a signal, from `farm cancel`, or from the caller.

The tuner reads its `event` between batches; the job driver reads it between steps. When a
second request says to stop at once, `abandon` runs the last words registered by whoever is
running the job (mark it cancelled, release its lock), each bounded in time, so that the
process may exit right after without leaving the registry claiming a running job.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


class Cancellation:
    """Set once; says why, and by which signal if one."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None
        self.signum: int | None = None
        self._last_words: list[Callable[[], None]] = []

    def request(self, reason: str, signum: int | None = None) -> None:
        if not self.event.is_set():
            self.reason, self.signum = reason, signum
            self.event.set()

    def request_by_signal(self, signum: int) -> None:
        self.request(f"interrupted by {signal.Signals(signum).name}", signum)

    def is_set(self) -> bool:
        return self.event.is_set()

    def on_abandon(self, last_words: Callable[[], None]) -> Callable[[], None]:
        """Run ``last_words`` if the job is abandoned; returns the function that unregisters it."""
        self._last_words.append(last_words)
        return lambda: self._last_words.remove(last_words) if last_words in self._last_words else None

    def abandon(self, timeout: float = 2.0) -> None:
        """Run the last words in a thread of their own, giving up after ``timeout`` seconds.

        The caller is about to exit: a write that waits on a lock held by the thread it
        interrupted must not keep it. What is not written is repaired by the next reader
        (foundation.job_driver.runners.fail_dead_jobs).
        """

        def run() -> None:
            for last_words in list(self._last_words):
                try:
                    last_words()
                except Exception:  # the process exits anyway; readers repair what is left
                    pass

        thread = threading.Thread(target=run, name="farm-last-words", daemon=True)
        thread.start()
        thread.join(timeout)
