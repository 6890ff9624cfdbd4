"""Serving a daemon's Prometheus metrics over plain HTTP (`--metrics-listen host:port`, /metrics).

Each daemon keeps its metrics in a registry of its own (coordinator.metrics, agent.metrics),
with the process's CPU, memory and garbage-collector figures, and adds collectors that read
its state when Prometheus scrapes. Nothing is pushed: the embedded mode serves nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.registry import Collector

from foundation.errors import FarmError


def standard_registry() -> CollectorRegistry:
    """A registry with the process, platform and GC collectors prometheus-client's default has."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class MetricsServer:
    """``registry`` (with ``collectors`` added while it runs) served on ``listen``."""

    def __init__(self, listen: str, registry: CollectorRegistry, collectors: Iterable[Collector] = ()):
        self.listen = listen
        self.registry = registry
        self.collectors = list(collectors)
        self.port: int | None = None
        self._server = None

    @property
    def address(self) -> str:
        return f"{self.listen.rpartition(':')[0]}:{self.port}"

    def start(self) -> "MetricsServer":
        host, sep, port_text = self.listen.rpartition(":")
        if not sep or not port_text.isdigit():
            raise FarmError(f"--metrics-listen {self.listen!r} is not host:port", "e.g. 0.0.0.0:9464")
        # A `_created` gauge beside every counter doubles the series and says when the process
        # started, which process_start_time_seconds already does.
        disable_created_metrics()
        for collector in self.collectors:
            self.registry.register(collector)
        try:
            self._server, _thread = start_http_server(int(port_text), host.strip("[]") or "0.0.0.0",
                                                      registry=self.registry)
        except OSError as err:
            self._unregister()
            raise FarmError(f"cannot serve metrics on {self.listen}: {err.strerror or err}",
                            "free the port or choose another --metrics-listen") from None
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
