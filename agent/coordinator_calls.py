"""Calls to the coordinator that outlast its restarts, and long polls that yield to a stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("farm.agent")


def answer_unless_stopped(call, stop: threading.Event, poll: float = 0.25):
    """The reply of a call in flight (a grpc future), or None if ``stop`` was set first: then
    the call is cancelled, so that a held long poll does not hold up the agent's shutdown.
    A failed call raises its grpc.RpcError, as a blocking call would."""
    answered = threading.Event()
    call.add_done_callback(lambda _call: answered.set())
    while not answered.wait(poll):
        if stop.is_set():
            call.cancel()
            return None
    return call.result()


def retry_unavailable(call: Callable, stop: threading.Event, what: str, patience: float | None = None):
    """Call until it succeeds; UNAVAILABLE/DEADLINE_EXCEEDED are retried with backoff."""
    import grpc

    backoff, begin = 0.5, time.monotonic()
    while not stop.is_set():
        try:
            return call()
        except grpc.RpcError as err:
            if err.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            if patience is not None and time.monotonic() - begin > patience:
                raise
            logger.warning("%s: coordinator unavailable (%s); retrying in %.1f s", what, err.details(), backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, 5.0)
    return None
