"""Group commit: the requests that arrive while one transaction runs are served by the next, together.

One writer thread per kind of request (reports, claims) takes everything waiting, at most
MAX_GROUP, and serves it in one transaction. Each caller still gets its own answer, and only
after the commit: what an agent was told is stored, or leased to it, is. One bad request
does not cost the others theirs (a failed group is served again one by one), and a caller
that gave up before its group began is not served.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

from foundation.errors import FarmError

logger = logging.getLogger("farm.coordinator")

Request = TypeVar("Request")
Answer = TypeVar("Answer")

# Requests per transaction at most: bounds a transaction's size when a backlog builds up.
MAX_GROUP = 256
# A caller waits at most this long for its commit.
COMMIT_TIMEOUT_S = 60.0


class GroupCommit(Generic[Request, Answer]):
    """One thread serving requests in groups with ``serve(requests) -> answers`` (an answer
    that is an exception is raised to its caller alone); `submit` blocks until its answer.

    ``serve`` may instead return a Future of the answers: the thread then goes on to the next
    group at once, and the answers are handed out when the future is done (the ingest process
    commits one group while it reads the next: coordinator.fleet.ingest_process).
    """

    def __init__(self, name: str, serve: Callable[[list[Request]], Sequence[Answer | BaseException]],
                 max_group: int = MAX_GROUP):
        self._serve = serve
        self._max_group = max_group
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._pending = 0
        self._count_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, request: Request) -> Answer:
        return self.enqueue(request).result(COMMIT_TIMEOUT_S)

    def enqueue(self, request: Request) -> Future:
        """Queue a request; its future holds the answer once its group is committed.

        For callers that must not hold a thread while they wait (the coordinator's asyncio
        handlers await it, asyncio.wrap_future).
        """
        if self._closed:
            raise FarmError("the coordinator is shutting down", "call again once it is back")
        future: Future = Future()
        with self._count_lock:
            self._pending += 1
        future.add_done_callback(self._answered)
        self._queue.put((request, future))
        return future

    def pending(self) -> int:
        """Requests queued or in the transaction being committed, not answered yet."""
        return self._pending

    def _answered(self, _future: Future) -> None:
        with self._count_lock:
            self._pending -= 1

    def waiting(self) -> int:
        return self._queue.qsize()

    def close(self) -> None:
        """Serve what is queued, then stop."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join(timeout=COMMIT_TIMEOUT_S)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            group, alone, stop = [], [], False
            while True:
                if item is None:
                    stop = True
                    break
                # Three items: a request of a failed group, already running, to serve alone.
                (alone if len(item) == 3 else group).append(item[:2])
                if len(group) + len(alone) >= self._max_group:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._commit(group)
            for request in alone:
                self._serve_group([request])
            if stop:
                return

    def _commit(self, group: list[tuple[Request, Future]]) -> None:
        # A caller that gave up (an asyncio handler whose call was cancelled) is not served:
        # a claim nobody hears of would lease a shard to no one. From here on, callers can
        # no longer cancel.
        group = [(request, future) for request, future in group if future.set_running_or_notify_cancel()]
        if group:
            self._serve_group(group)

    def _serve_group(self, group: list[tuple[Request, Future]]) -> None:
        try:
            answers = self._serve([request for request, _ in group])
        except Exception as err:
            if len(group) > 1:
                # One bad request must not cost the others theirs: each again, alone.
                logger.warning("a group of %d requests failed (%s); serving them one by one", len(group), err)
                for item in group:
                    self._serve_group([item])
                return
            group[0][1].set_exception(err)
            return
        if isinstance(answers, Future):
            answers.add_done_callback(lambda done: self._settle(group, done))
            return
        self._answer(group, answers)

    def _settle(self, group: list[tuple[Request, Future]], done: Future) -> None:
        """The answers of a group served in the background (called where its future was set)."""
        err = done.exception()
        if err is None:
            self._answer(group, done.result())
        elif len(group) > 1 and not self._closed:
            logger.warning("a group of %d requests failed (%s); serving them one by one", len(group), err)
            for request, future in group:
                self._queue.put((request, future, True))
        else:
            for _, future in group:
                future.set_exception(err)

    def _answer(self, group: list[tuple[Request, Future]], answers: Sequence[Answer | BaseException]) -> None:
        for (_, future), answer in zip(group, answers):
            if isinstance(answer, BaseException):
                future.set_exception(answer)
            else:
                future.set_result(answer)
