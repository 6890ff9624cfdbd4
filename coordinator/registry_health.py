"""Whether the coordinator's registry answers: its health, what callers are told, what is logged.

A coordinator whose database is gone (dropped, its server down, unreachable) can do nothing
useful, and must say so instead of serving errors: while the registry does not answer, the
health service says NOT_SERVING, every call but the health service's ends UNAVAILABLE with the
registry's error in one line (`RegistryGate`, marked so that callers tell it from a coordinator
they cannot reach), the log gets the first failure and then a summary every
`SUMMARY_EVERY_S`, not a traceback per call, and agents back off (agent.state.policy). The
coordinator checks the registry again at every tick and serves again once a whole tick
succeeds. A registry whose schema is gone (the database re-created empty, its tables
dropped) will not come back by waiting: `check_registry` raises `RegistrySchemaLost`, and the
coordinator exits with it (exit code 4).

While the registry is lost, the coordinator hears no agent: `heard_since` is when it last began
to, and silence before it is not held against anyone (coordinator.housekeeping).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

import grpc

from coordinator.access import HEALTH_METHOD_PREFIX
from foundation.clock import utc_now
from foundation.errors import RegistryError
from foundation.registry.store import RegistryStore
from foundation.wire import UNAVAILABLE_CAUSE_KEY, UNAVAILABLE_REGISTRY

logger = logging.getLogger("farm.coordinator")

# How often a registry that keeps failing is logged again (one line each time).
SUMMARY_EVERY_S = 30.0


class RegistrySchemaLost(RegistryError):
    """The registry's database answers, but its farm schema is gone or another than this farm's."""


def check_registry(store: RegistryStore) -> None:
    """Ask the registry for its schema revision: RegistryError if it does not answer,
    RegistrySchemaLost if it answers without the schema this coordinator started on."""
    from foundation.registry.migrate import current_revision, head_revision

    with store.unit_of_work.read() as session:
        revision = current_revision(session.connection())
    head = head_revision()
    if revision == head:
        return
    if revision is None:
        raise RegistrySchemaLost(
            f"the registry at {store.url} lost its schema while the coordinator ran (no farm tables are left)",
            "restore the database from a backup, or start the coordinator on a new registry",
        )
    raise RegistrySchemaLost(
        f"the registry at {store.url} changed to schema revision {revision} while the coordinator ran "
        f"(it runs on {head})",
        "restart the coordinator with the tvm-farm version of that schema",
    )


def one_line(text: object) -> str:
    return " ".join(str(text).split())


class RegistryHealth:
    """What the coordinator knows of its registry: answering or failing (since when, why).

    ``on_change(answering)`` is called, outside any lock of this object, when that flips (the
    server sets its health service). Thread-safe: the tick thread writes it, the gate reads it.
    """

    def __init__(self, on_change: Callable[[bool], None] = lambda answering: None,
                 clock: Callable[[], float] = time.monotonic):
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._error: str | None = None  # the registry's error while failing, one line
        self._failing_since = 0.0
        self._failures = 0
        self._summarised_at = 0.0
        self._heard_since = utc_now()

    @property
    def error(self) -> str | None:
        """The registry's error while it fails (what is wrong, one line), None while it answers."""
        return self._error

    @property
    def heard_since(self) -> datetime:
        """Since when the coordinator has been able to hear agents: its start, or the moment its
        registry last came back; while it fails, now (the gate refuses every beat, so the tick
        that finds it back must judge nobody's silence)."""
        return utc_now() if self._error is not None else self._heard_since

    def failed(self, err: RegistryError) -> None:
        """A check of the registry failed with ``err``."""
        line, now = one_line(err), self._clock()
        with self._lock:
            first = self._error is None
            self._error = one_line(err.problem)  # for callers; the log has the operator's fix too
            self._failures += 1
            if first:
                self._failing_since = self._summarised_at = now
                logger.warning("registry failing: %s; not serving until it answers", line)
            elif now - self._summarised_at >= SUMMARY_EVERY_S:
                self._summarised_at = now
                logger.warning("registry still failing after %.0f s (%d failed checks): %s",
                               now - self._failing_since, self._failures, line)
        if first:
            self._on_change(False)

    def answered(self) -> None:
        """A whole tick succeeded: the registry answers."""
        with self._lock:
            if self._error is None:
                return
            logger.warning("registry answers again after %.0f s (%d failed checks); serving",
                           self._clock() - self._failing_since, self._failures)
            self._error = None
            self._failures = 0
            self._heard_since = utc_now()
        self._on_change(True)


class RegistryGate(grpc.aio.ServerInterceptor):
    """Ends every call but the health service's UNAVAILABLE while the registry fails, with its
    error and trailing metadata saying the registry is the cause (farm.client tells it apart
    from a coordinator it cannot reach)."""

    def __init__(self, health: RegistryHealth):
        self._health = health

    async def intercept_service(self, continuation, handler_call_details):
        error = self._health.error
        if error is None or handler_call_details.method.startswith(HEALTH_METHOD_PREFIX):
            return await continuation(handler_call_details)
        return _refusal(error)


def registry_failing(error: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What a call the registry failed ends with (UNAVAILABLE): its message, and the trailing
    metadata that tells callers it is the registry (farm.client), not a coordinator out of reach.
    The gate's refusals and a call that met the failure itself (coordinator.servicer) say the same."""
    return f"the coordinator's registry is failing: {one_line(error)}", ((UNAVAILABLE_CAUSE_KEY, UNAVAILABLE_REGISTRY),)


def _refusal(error: str) -> grpc.RpcMethodHandler:
    message, cause = registry_failing(error)

    async def refuse(request, context):
        await context.abort(grpc.StatusCode.UNAVAILABLE, message, trailing_metadata=cause)

    return grpc.unary_unary_rpc_method_handler(refuse)
