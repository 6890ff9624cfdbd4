"""Run the coordinator: gRPC server, health service, the tick thread and (by default) a tracker.

Its health follows its registry (coordinator.registry_health): NOT_SERVING while the database
does not answer, SERVING again once it does; a registry whose schema is gone stops it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from coordinator.access import TokenCheck
from coordinator.call_metrics import CallMetrics
from coordinator.cluster_store import ClusterStore
from coordinator.fleet import IngestProcess, ReportPolicy
from coordinator.heap import PacedCollector
from coordinator.housekeeping import Housekeeping
from coordinator.registry_claim import RegistryClaim, RegistryClaimed
from coordinator.registry_health import (
    SUMMARY_EVERY_S,
    RegistryGate,
    RegistryHealth,
    RegistrySchemaLost,
    check_registry,
    one_line,
)
from coordinator.request_decoding import DecodeRequests
from coordinator.service import Coordinator, CoordinatorSettings
from coordinator.servicer import FarmAgentServicer, FarmClientServicer
from coordinator.serving_health import ServingHealth
from foundation.errors import FarmError, RegistryError
from foundation.metrics_http import MetricsServer
from foundation.processes.heap import freeze_long_lived, tune_collector
from foundation.registry.store import RegistryStore
from foundation.wire import CHANNEL_OPTIONS, farm_pb2
from foundation.wire.access import ServerAccess

logger = logging.getLogger("farm.coordinator")

# Libraries and ONNX files travel inside messages.
SERVICE_NAMES = tuple(farm_pb2.DESCRIPTOR.services_by_name[name].full_name for name in ("FarmClient", "FarmAgent"))
DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_TRACKER_LISTEN = "127.0.0.1:0"


class _EventLoopThread:
    """An asyncio event loop of its own in a daemon thread, for the grpc.aio server: `serve`
    and `stop` are called from plain threads (the CLI, tests, local clusters)."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine, timeout: float | None = None):
        """Run a coroutine on the loop and wait for its result here."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        # A handler still waiting on its thread when the server stopped (its grace ran out) is
        # cancelled and let finish here: a loop closed under it prints "Task was destroyed but
        # it is pending!" and a traceback when the task is collected.
        try:
            self.run(_cancel_the_rest(), timeout=5)
        except (RuntimeError, futures.TimeoutError):  # futures': not the builtin before Python 3.11
            pass  # the loop is not running, or a task would not end: the loop closes anyway
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


async def _cancel_the_rest() -> None:
    """Cancel every other task on the running loop and wait until each has ended."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class CoordinatorServer:
    """A running coordinator. ``stop(grace)`` drains it: NOT_SERVING, no new work, in-flight
    calls get ``grace`` seconds, then the tick thread, the tracker and the registry stop."""

    server: grpc.aio.Server
    port: int
    host: str
    coordinator: Coordinator
    housekeeping: Housekeeping  # the tick the tick thread runs
    health: health.aio.HealthServicer
    tracker: object | None  # the TrackerProcess this server started, if any
    _stop_ticking: threading.Event
    _ticker: threading.Thread | None
    _loop: _EventLoopThread
    _pool: futures.ThreadPoolExecutor
    ingest: IngestProcess | None = None  # committing reports, if in a process of their own
    health_server: grpc.aio.Server | None = None  # the health service alone, on a plaintext port
    health_port: int | None = None
    metrics: MetricsServer | None = None  # Prometheus' /metrics, if served
    registry: RegistryHealth | None = None  # whether the registry answers
    serving: ServingHealth | None = None  # what /healthz on the metrics port says
    claim: RegistryClaim | None = None  # this coordinator's hold on its registry, one per registry
    # Set to end the coordinator: by a signal (run_until_signalled), or by the coordinator itself
    # when it cannot go on (its registry's schema is gone, another coordinator claimed it), and then
    # `failure` says why.
    ended: threading.Event = field(default_factory=threading.Event)
    failure: FarmError | None = None
    _stopped: bool = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def tracker_address(self) -> str:
        return f"{self.coordinator.tracker_host}:{self.coordinator.tracker_port}"

    def stop(self, grace: float = 10.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        logger.info("coordinator draining (grace %.0f s)", grace)
        self._loop.run(self._drain(grace))
        self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._stop_ticking.set()
        self.coordinator.wake.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        self.housekeeping.close()
        self.coordinator.close()
        if self.ingest is not None:
            self.ingest.close()
        if self.tracker is not None:
            self.tracker.stop()
        if self.metrics is not None:
            self.metrics.stop()
        self.coordinator.store.dispose()
        if self.claim is not None:
            self.claim.release()
        logger.info("coordinator stopped")

    async def _drain(self, grace: float) -> None:
        # Refuse new calls first, then tell watchers: whoever hears NOT_SERVING and calls
        # again is refused, never answered by a coordinator that is going away. The server
        # stops taking calls in the first step of its stop(), before that first awaits.
        stopping = asyncio.ensure_future(self.server.stop(grace))
        await asyncio.sleep(0)
        await self.health.enter_graceful_shutdown()
        if self.serving is not None:
            self.serving.draining()
        self.coordinator.draining = True
        await stopping
        if self.health_server is not None:  # said NOT_SERVING while the API drained
            await self.health_server.stop(0)

    def wait(self) -> None:
        self._loop.run(self.server.wait_for_termination())


def serve(
    listen: str = DEFAULT_LISTEN,
    registry_url: str | None = None,
    tracker: str | None = None,
    *,
    tracker_listen: str = DEFAULT_TRACKER_LISTEN,
    heartbeat_interval: float = 5.0,
    lease_ttl: float = 30.0,
    max_attempts: int = 3,
    report_policy: ReportPolicy = ReportPolicy(),
    data_dir: Path | None = None,
    tick_interval: float = 0.5,
    max_workers: int = 256,
    ingest_process: bool | None = None,
    access: ServerAccess | None = None,
    health_listen: str | None = None,
    metrics_listen: str | None = None,
) -> CoordinatorServer:
    """Start a coordinator on ``listen`` (port 0: any free port) and return it running.

    ``tracker`` is the host:port of a TVM RPC tracker agents should use; without one the
    coordinator starts its own on ``tracker_listen``. ``report_policy``: how large agents'
    reports are and how often they come (coordinator.fleet.report_sizing; the flags of
    `farm coordinator`).
    ``ingest_process``: reports are read and committed in a process of their own
    (coordinator.fleet.ingest_process); by default on
    PostgreSQL, where a fleet's reports come in, and not on SQLite, one box's registry that
    takes one writer at a time anyway.

    ``access``: the token every call but the health service's must carry, and TLS; without a
    token the coordinator refuses to listen beyond loopback (foundation.wire.access).
    ``health_listen``: also serve the health service alone, in plaintext, on this address (for
    probes that cannot speak TLS, such as Kubernetes' native gRPC probes).
    ``metrics_listen``: serve Prometheus metrics there (coordinator.metrics).
    """
    from foundation import config
    from foundation.rpc.tracker import TrackerProcess, parse_tracker_address

    # Both before the registry and the tracker: nothing to undo. The address first: a token
    # is no answer to a port that is taken or a host that does not exist.
    _check_port_free(listen)
    if health_listen:
        _check_port_free(health_listen, "--health-listen")
    access = access or ServerAccess()
    access.check_listen(listen)
    url = config.registry_url(registry_url)
    store = RegistryStore(url)
    owned = ingest = metrics = claim = None
    try:
        # Before anything serves or plans: a second coordinator on this registry stops here.
        claim = RegistryClaim(url)
        registry = RegistryHealth(lambda answering: _set_health(loop, health_servicer, answering))
        serving = ServingHealth(registry)
        if metrics_listen:  # a malformed or taken address ends it here, before a tracker process starts
            from coordinator.metrics import serve_metrics

            metrics = serve_metrics(metrics_listen, store, serving)
        if tracker is None:
            # Port 0 (any free port) is fine here, unlike in an address agents are given.
            host, _, port_text = tracker_listen.rpartition(":")
            host, port = (host.strip("[]"), 0) if port_text == "0" else parse_tracker_address(tracker_listen)
            owned = TrackerProcess(host, port).start()
            # Agents on other boxes cannot reach a wildcard address: tell them this host's name.
            advertised = socket.getfqdn() if owned.host in ("0.0.0.0", "::", "") else owned.host
            tracker = f"{advertised}:{owned.port}"
        settings = CoordinatorSettings(
            data_dir=Path(data_dir) if data_dir else config.data_dir() / "coordinator",
            heartbeat_interval=heartbeat_interval, lease_ttl=lease_ttl, max_attempts=max_attempts,
            report_policy=report_policy,
        )
        if ingest_process if ingest_process is not None else store.dialect == "postgresql":
            ingest = IngestProcess(url)
        coordinator = Coordinator(store, ClusterStore(store), tracker, settings,
                                  ingest.submit if ingest is not None else None)

        # Plain handlers run in this pool (coordinator.servicer); reports and claims waiting
        # for their group's commit hold none of its threads.
        pool = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="farm-grpc")
        loop = _EventLoopThread("farm-grpc-loop")
        server = health_server = health_port = health_servicer = None
        try:
            server, port, health_servicer = loop.run(_start_grpc(coordinator, listen, pool, access, registry))
            if health_listen:
                health_server, health_port = loop.run(_start_health(health_servicer, health_listen))
        except BaseException:
            for started in (server, health_server):
                if started is not None:
                    loop.run(started.stop(0))
            loop.close()
            pool.shutdown(wait=False)
            raise
    except BaseException:
        if metrics is not None:
            metrics.stop()
        if ingest is not None:
            ingest.close()
        if owned is not None:
            owned.stop()
        if claim is not None:
            claim.release()
        store.dispose()
        raise

    tune_collector()
    freeze_long_lived()
    stop_ticking = threading.Event()
    host = listen.rsplit(":", 1)[0].strip("[]")
    housekeeping = Housekeeping(store, coordinator.cluster, coordinator.live, coordinator.jobs,
                                lease_ttl=settings.lease_ttl, max_attempts=settings.max_attempts)
    running = CoordinatorServer(server, port, host, coordinator, housekeeping, health_servicer, owned, stop_ticking,
                                None, loop, pool, ingest, health_server=health_server, health_port=health_port,
                                metrics=metrics, registry=registry, serving=serving, claim=claim)
    claim.describe(f"{socket.getfqdn() if host in ('0.0.0.0', '::', '') else host}:{port}")
    running._ticker = threading.Thread(target=_tick_loop, args=(running, tick_interval), name="farm-tick",
                                       daemon=True)
    running._ticker.start()
    serving.serves()
    logger.info("coordinator listening on %s:%d (%s, %s), registry %s, tracker %s", host, port,
                "TLS" if access.tls else "plaintext", "token required" if access.token else "no token",
                store.url, tracker)
    return running


async def _start_grpc(coordinator: Coordinator, listen: str, pool: futures.ThreadPoolExecutor,
                      access: ServerAccess, registry: RegistryHealth):
    """The grpc.aio server, created and started on the loop that will run it."""
    from foundation.wire import farm_pb2_grpc

    # Every call counted, those refused too; then the token: a caller without it learns nothing,
    # not even that the registry fails.
    interceptors = [CallMetrics(), *([TokenCheck(access.token)] if access.token else []), RegistryGate(registry),
                    DecodeRequests()]
    # so_reuseport off: gRPC sets it by default on Linux, and a second coordinator on a taken port
    # then started and shared the port with the first, clients and agents split between them.
    server = grpc.aio.server(migration_thread_pool=pool, options=[*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)],
                             interceptors=interceptors)
    farm_pb2_grpc.add_FarmClientServicer_to_server(
        FarmClientServicer(coordinator.client_calls, pool, packs=coordinator.pack_calls), server)
    farm_pb2_grpc.add_FarmAgentServicer_to_server(FarmAgentServicer(
        coordinator.agent_calls, coordinator.shard_calls, coordinator.report_calls, coordinator.validation_calls,
        coordinator.report_sizing, pool, idle_retry_after=coordinator.settings.idle_retry_after,
        draining=lambda: coordinator.draining), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = _add_port(server, listen, access.credentials())
    await server.start()
    for name in ("", *SERVICE_NAMES):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    # Collected between the loop's callbacks, a little at a time (coordinator.heap); it ends
    # with the loop.
    PacedCollector(asyncio.get_running_loop()).start()
    return server, port, health_servicer


async def _start_health(health_servicer: health.aio.HealthServicer, listen: str):
    """A server of the health service alone, plaintext, answering what the API's server's
    health service says (it is the same servicer)."""
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = _add_port(server, listen, None, "--health-listen")
    await server.start()
    return server, port


def _add_port(server: grpc.aio.Server, listen: str, credentials: grpc.ServerCredentials | None,
              flag: str = "--listen") -> int:
    """Bind ``listen``, the address the option ``flag`` gave; its refusal names that option."""
    _check_port_free(listen, flag)
    try:
        port = server.add_secure_port(listen, credentials) if credentials else server.add_insecure_port(listen)
    except RuntimeError:
        port = 0
    if port == 0:
        raise _cannot_listen(listen, "the port is in use (another coordinator?) or the address is not this host's",
                             flag)
    return port


def _check_port_free(listen: str, flag: str = "--listen") -> None:
    """Refuse a taken port before gRPC tries it (gRPC's own refusal is a log line of its own)."""
    host, _, port_text = listen.rpartition(":")
    if not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise _cannot_listen(listen, "it is not host:port", flag,
                             f"give {flag} as HOST:PORT, a port from 0 (any free one) to 65535")
    if int(port_text) == 0:
        return  # any free port
    try:
        addresses = socket.getaddrinfo(host.strip("[]") or None, int(port_text), type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise _cannot_listen(listen, f"the host is unknown ({err.strerror})", flag,
                             f"give {flag} an address of this host (0.0.0.0 for all, 127.0.0.1 for loopback)"
                             ) from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            try:
                probe.bind(address)
            except OSError as err:
                raise _cannot_listen(listen, err.strerror or str(err), flag) from None


def _cannot_listen(listen: str, why: str, flag: str = "--listen", fix: str | None = None) -> FarmError:
    return FarmError(f"the coordinator cannot listen on {listen} ({flag}): {why}",
                     fix or f"stop what holds the port (another coordinator?), or choose another {flag}")


def _set_health(loop: _EventLoopThread, health_servicer, answering: bool) -> None:
    """Every service SERVING or NOT_SERVING (from the tick thread; a draining server's health
    service ignores it and stays NOT_SERVING)."""
    status = health_pb2.HealthCheckResponse.SERVING if answering else health_pb2.HealthCheckResponse.NOT_SERVING

    async def set_all():
        for name in ("", *SERVICE_NAMES):
            await health_servicer.set(name, status)

    if health_servicer is None or loop.loop.is_closed():
        return
    try:
        loop.run(set_all(), timeout=10)
    except (RuntimeError, futures.TimeoutError):  # the server stopped meanwhile: it says NOT_SERVING
        pass


def _tick_loop(server: CoordinatorServer, interval: float) -> None:
    """Tick until stopped; a registry whose schema is gone, or that another coordinator claimed, ends
    the coordinator (`server.ended`)."""
    coordinator, stop = server.coordinator, server._stop_ticking
    quiet = _RepeatedError()
    while not stop.is_set():
        coordinator.wake.clear()
        try:
            if server.claim is not None:
                server.claim.keep()
            _tick(coordinator, server.housekeeping, server.registry, quiet)
        except (RegistrySchemaLost, RegistryClaimed) as err:
            logger.error("%s; stopping", one_line(err))
            server.failure = err
            server.ended.set()
            return
        except Exception as err:  # a bug: its traceback once, not one per tick
            quiet.log(err, traceback=True)
        coordinator.wake.wait(interval)


def _tick(coordinator: Coordinator, housekeeping: Housekeeping, registry: RegistryHealth,
          quiet: "_RepeatedError") -> None:
    """One tick, and what it says of the registry: a failing registry is checked first, and a
    tick that failed on the registry is checked after, which tells a registry that does not
    answer (NOT_SERVING) from a tick's own trouble with it (logged, as rarely as it repeats)."""
    if registry.error is not None:
        try:
            check_registry(coordinator.store)
        except RegistrySchemaLost:
            raise
        except RegistryError as err:
            registry.failed(err)
            return
    try:
        housekeeping.tick(heard_since=registry.heard_since)
    except RegistryError as err:
        try:
            check_registry(coordinator.store)
        except RegistrySchemaLost:
            raise
        except RegistryError as unreachable:
            registry.failed(unreachable)
            return
        if registry.error is not None:
            registry.failed(err)  # it answers, yet a tick cannot run on it: still not serving
        else:
            quiet.log(err)
        return
    registry.answered()


class _RepeatedError:
    """Logs a tick's error once, then the same error at most every SUMMARY_EVERY_S (in one line;
    with ``traceback``, the first time with its traceback: call it from the except clause)."""

    def __init__(self):
        self._last: tuple[str, float] | None = None

    def log(self, err: Exception, traceback: bool = False) -> None:
        line, now = f"{type(err).__name__}: {one_line(err)}", time.monotonic()
        if self._last is not None and self._last[0] == line and now - self._last[1] < SUMMARY_EVERY_S:
            return
        first = self._last is None or self._last[0] != line
        logger.warning("coordinator tick failed (trying again): %s", line, exc_info=traceback and first)
        self._last = (line, now)


def leave_process(code: int) -> NoReturn:
    """End this process with ``code`` once its coordinator has stopped, skipping the
    interpreter's teardown (for `farm coordinator`).

    Builds and cost-model training run on daemon threads that a stop does not wait for (a
    restarted coordinator redoes them), inside TVM's and xgboost's C++ code. The teardown ends
    such a thread when it next takes the GIL, unwinding its C++ frames, and the C++ runtime
    aborts the process ("terminate called ...", "FATAL: exception not rethrown", SIGABRT):
    a crash to systemd or Kubernetes after a clean stop. By now everything the coordinator owns
    is stopped and every write committed; only the logs are left to flush.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def run_until_signalled(server: CoordinatorServer, grace: float = 10.0,
                        announce: Callable[[], None] | None = None) -> None:
    """Block until SIGTERM or SIGINT, then drain and stop (for `farm coordinator`); raise the
    coordinator's `failure` if it ended on its own (its registry's schema is gone, or another claimed it). ``announce``
    runs once the signals are taken: a banner saying SIGTERM stops it is then true at once."""
    stop = server.ended

    def on_signal(signum, _frame) -> None:
        logger.info("received %s", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    if announce is not None:
        announce()
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.stop(grace)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if server.failure is not None:
        raise server.failure
