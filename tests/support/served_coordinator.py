"""A real coordinator served in this process on SQLite, with a plaintext channel to it: for tests
that speak its gRPC API directly (hostile requests, refused reports)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc


@contextmanager
def served_coordinator(directory: Path, **settings) -> Iterator[tuple[object, grpc.Channel]]:
    """A coordinator whose registry (``directory``/registry.db) and data live under ``directory``,
    ticking every 0.1 s, with ``settings`` for coordinator.server.serve (access=, lease_ttl=, ...);
    stopped after."""
    from coordinator.server import serve

    directory.mkdir(parents=True, exist_ok=True)
    server = serve(**{"listen": "127.0.0.1:0", "registry_url": f"sqlite:///{directory / 'registry.db'}",
                      "tracker": "127.0.0.1:9190", "heartbeat_interval": 0.5, "tick_interval": 0.1,
                      "data_dir": directory / "coordinator", **settings})
    channel = grpc.insecure_channel(server.address)
    try:
        yield server, channel
    finally:
        channel.close()
        server.stop(grace=1)
