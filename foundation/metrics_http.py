"""Serving a daemon's Prometheus metrics over plain HTTP (`--metrics-listen host:port`, /metrics),
and its liveness check (/healthz) where it has one.

Each daemon keeps its metrics in a registry of its own (coordinator.metrics, agent.metrics),
with the process's CPU, memory and garbage-collector figures and what it runs (farm_build_info),
and adds collectors that read its state when Prometheus scrapes. Nothing is pushed: the embedded mode serves nothing.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    make_wsgi_app,
)
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from foundation.errors import FarmError


def standard_registry(build: Mapping[str, str]) -> CollectorRegistry:
    """A registry with the process, platform and GC collectors prometheus-client's default has,
    and `farm_build_info` (always 1) labelled with ``build``: what the process runs."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    Gauge("farm_build_info", "What this process runs (always 1): tvm-farm's, TVM's and Python's versions.",
          sorted(build), registry=registry).labels(**build).set(1)
    return registry


# A liveness check: (alive, one line saying why), answered on /healthz as 200 or 503.
HealthCheck = Callable[[], tuple[bool, str]]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):  # a scrape every 15 s is no news
        pass


def _wsgi_app(registry: CollectorRegistry, health: HealthCheck | None):
    metrics = make_wsgi_app(registry)

    def text() -> list[tuple[str, str]]:
        # A new list per answer: wsgiref adds this answer's Content-Length to the list it is given,
        # and a shared one cut every later answer to the first one's length.
        return [("Content-Type", "text/plain; charset=utf-8")]

    def app(environ, start_response):
        path = environ.get("PATH_INFO")
        if path == "/metrics":
            return metrics(environ, start_response)
        if health is not None and path == "/healthz":
            alive, why = health()
            start_response("200 OK" if alive else "503 Service Unavailable", text())
            return [f"{why}\n".encode()]
        # prometheus-client answers every path with the metrics: a probe of /healthz on a daemon
        # that has no such check would take the page for a health answer.
        start_response("404 Not Found", text())
        return [f"not found; the metrics are at /metrics{' (health at /healthz)' if health else ''}\n".encode()]

    return app


class MetricsServer:
    """``registry`` (with ``collectors`` added while it runs) served on ``listen``; with
    ``health``, also /healthz, which a metrics thread alone cannot fake: it asks the daemon."""

    def __init__(self, listen: str, registry: CollectorRegistry, collectors: Iterable[Collector] = (),
                 health: HealthCheck | None = None):
        self.listen = listen
        self.registry = registry
        self.collectors = list(collectors)
        self.health = health
        self.port: int | None = None
        self._server = None

    @property
    def address(self) -> str:
        return f"{self.listen.rpartition(':')[0]}:{self.port}"

    def start(self) -> "MetricsServer":
        host, sep, port_text = self.listen.rpartition(":")
        if not sep or not port_text.isdigit() or int(port_text) > 65535:
            raise FarmError(f"--metrics-listen {self.listen!r} is not host:port",
                            "give a port from 0 (any free one) to 65535, e.g. 0.0.0.0:9464")
        # A `_created` gauge beside every counter doubles the series and says when the process
        # started, which process_start_time_seconds already does.
        disable_created_metrics()
        for collector in self.collectors:
            self.registry.register(collector)
        host = host.strip("[]") or "0.0.0.0"

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        try:
            self._server = make_server(host, int(port_text), _wsgi_app(self.registry, self.health), Server,
                                       handler_class=_QuietHandler)
        except OSError as err:
            self._unregister()
            fix = ("give --metrics-listen an address of this host (0.0.0.0 for all, 127.0.0.1 for loopback)"
                   if isinstance(err, socket.gaierror) else "free the port or choose another --metrics-listen")
            raise FarmError(f"cannot serve metrics on {self.listen}: {err.strerror or err}", fix) from None
        threading.Thread(target=self._server.serve_forever, name="farm-metrics", daemon=True).start()
        self.port = self._server.server_port
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._unregister()

    def _unregister(self) -> None:
        for collector in self.collectors:
            try:
                self.registry.unregister(collector)
            except KeyError:
                pass
