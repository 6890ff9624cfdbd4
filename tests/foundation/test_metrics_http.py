"""A daemon's metrics port over real HTTP on loopback: /metrics, its /healthz where it has one, 404 for the rest."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Gauge

from foundation.metrics_http import MetricsServer


def _get(server: MetricsServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{server.address}{path}", timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def serve():
    started: list[MetricsServer] = []

    def start(health=None) -> MetricsServer:
        registry = CollectorRegistry()
        Gauge("farm_build_info", "What this process runs.", ["farm"], registry=registry).labels(farm="test").set(1)
        started.append(MetricsServer("127.0.0.1:0", registry, health=health).start())
        return started[-1]

    yield start
    for server in started:
        server.stop()


def test_metrics_are_served_at_metrics_and_nothing_else_pretends_to_be_them(serve):
    """/healthz, and any path, answered 200 with the metrics page: a probe of the coordinator's
    metrics port took that for a health answer."""
    server = serve()
    status, page = _get(server, "/metrics")
    assert status == 200 and 'farm_build_info{farm="test"} 1.0' in page
    assert _get(server, "/metrics?name[]=farm_build_info")[0] == 200  # Prometheus' own filter
    for path in ("/healthz", "/", "/metrics/x", "/anything"):
        status, page = _get(server, path)
        assert status == 404 and "farm_build_info" not in page, path
        assert "/metrics" in page  # says where the metrics are


def test_healthz_answers_the_daemons_own_check_where_it_has_one(serve):
    alive = serve(health=lambda: (True, "main loop turned 0.1 s ago"))
    assert _get(alive, "/healthz") == (200, "main loop turned 0.1 s ago\n")
    stuck = serve(health=lambda: (False, "main loop stuck for 130 s"))
    assert _get(stuck, "/healthz") == (503, "main loop stuck for 130 s\n")
    assert _get(stuck, "/metrics")[0] == 200


def test_every_answer_is_whole(serve):
    """wsgiref writes each answer's Content-Length into the header list it is given: one list
    shared by all answers cut every later one to the first one's length ("ok" then "the c")."""
    said = iter(["ok", "the agent's main loop turned 0.2 s ago", "the agent's main loop turned 10.4 s ago"])
    server = serve(health=lambda: (True, next(said)))
    assert [_get(server, "/healthz")[1] for _ in range(3)] == [
        "ok\n", "the agent's main loop turned 0.2 s ago\n", "the agent's main loop turned 10.4 s ago\n"]
    assert _get(server, "/nothing") == (404, "not found; the metrics are at /metrics (health at /healthz)\n")
    assert _get(server, "/other") == (404, "not found; the metrics are at /metrics (health at /healthz)\n")
