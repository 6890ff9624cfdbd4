"""A daemon thread running the coordinator's slow steps (TVM plans and builds, cost-model training) in order."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from foundation.processes.heap import freeze_long_lived

logger = logging.getLogger("farm.coordinator")


class BackgroundWorker:
    """One daemon thread running queued jobs' steps in order, each job at most once at a time.

    Daemon, so a build in progress never holds up shutdown: a restarted coordinator redoes it.
    """

    def __init__(self, name: str):
        self.name = name
        self._queue: queue.Queue[tuple[str, Callable[[], None]] | None] = queue.Queue()
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, key: str, step: Callable[[], None]) -> bool:
        """Queue ``step`` unless one for ``key`` is queued or running; True if queued."""
        with self._lock:
            if key in self._pending:
                return False
            self._pending.add(key)
        self._queue.put((key, step))
        return True

    def stop(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            key, step = item
            try:
                step()
                # A plan or a build leaves models and TVM objects behind for good.
                freeze_long_lived()
            except Exception:
                logger.exception("%s: step for %s failed", self.name, key)
            finally:
                with self._lock:
                    self._pending.discard(key)
