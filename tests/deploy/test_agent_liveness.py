"""The agents' liveness check, /healthz on the metrics port, as Kubernetes' probe and the compose
healthcheck ask it: it fails when the agent's main loop has stopped turning, which /metrics
(served by a thread of its own) never shows.
Checked on a real agent process: fresh while its loop turns, failing once the loop has ended
while the process and its metrics server live on.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import yaml

from agent.metrics import LoopLiveness
from farm.local_cluster import free_port

from support.deploy_recipes import COMPOSE_FILE, find, pod_template

# An agent whose loop ends on SIGUSR1 while its process, and so its metrics server, stays up:
# what a wedged main loop looks like from outside. The coordinator address is a closed port
# (the agent keeps retrying its registration, its loop turning all the while).
HARNESS = """
import signal, sys, threading, time
from agent.daemon import Agent, AgentSettings
from agent.metrics import serve_metrics

agent = Agent(AgentSettings(coordinator=sys.argv[1]))
metrics = serve_metrics("127.0.0.1:0", agent, "cpu", stale_after_s=float(sys.argv[2]))
print(metrics.port, flush=True)
stop = threading.Event()
signal.signal(signal.SIGUSR1, lambda *_: stop.set())
agent.run(stop)
print("loop ended", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(1)
"""
STALE_AFTER_S = 2.0


def probe_path() -> str:
    [container] = pod_template(find("Deployment", "farm-agent-cpu"))["spec"]["containers"]
    return container["livenessProbe"]["httpGet"]["path"]


def probe(port: int) -> tuple[int, str]:
    """What Kubernetes' httpGet probe sees: a status (200-399 passes) and the body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{probe_path()}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def compose_healthcheck(port: int) -> list[str]:
    """The compose agents' healthcheck command, as written, run with this venv's Python on ``port``."""
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    test = services["agent-1"]["healthcheck"]["test"]
    assert services["agent-2"]["healthcheck"] == services["agent-1"]["healthcheck"]
    assert test[:3] == ["CMD", "/opt/tvm-farm/.venv/bin/python", "-c"] and "127.0.0.1:9465/healthz" in test[3]
    return [sys.executable, "-c", test[3].replace("127.0.0.1:9465", f"127.0.0.1:{port}")]


def healthy(port: int) -> bool:
    return subprocess.run(compose_healthcheck(port), capture_output=True, timeout=60).returncode == 0


def test_liveness_probe_fails_when_the_agent_loop_stops(tmp_path):
    log = (tmp_path / "agent.log").open("w")
    agent = subprocess.Popen([sys.executable, "-c", HARNESS, f"127.0.0.1:{free_port()}", str(STALE_AFTER_S)],
                             stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        port = int(agent.stdout.readline())
        # Fresh: once the loop turns (after TVM's import and the fingerprint), and for as long
        # as it keeps turning, well past the staleness limit.
        status, body = wait_for(lambda: (answer := probe(port))[0] == 200 and answer, 180,
                                (tmp_path / "agent.log").read_text()[-2000:])
        assert "turned" in body
        time.sleep(3 * STALE_AFTER_S)
        assert probe(port)[0] == 200
        assert healthy(port), "the compose healthcheck fails a live agent"
        # The loop ends; the process and its metrics thread do not.
        agent.send_signal(signal.SIGUSR1)
        assert agent.stdout.readline().strip() == "loop ended"
        status, body = wait_for(lambda: (answer := probe(port))[0] != 200 and answer, STALE_AFTER_S + 10,
                                "the probe still passes with the loop stopped")
        assert status == 503 and "last turned" in body, (status, body)
        assert not healthy(port), "the compose healthcheck passes a stopped loop"
        assert agent.poll() is None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            assert answer.status == 200, "/metrics still answers: it alone would have said nothing"
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
        log.close()


def test_loop_liveness_by_age():
    """Not started, fresh, stale: the check's three answers."""
    agent = SimpleNamespace(loop_turned_at=None)
    check = LoopLiveness(agent, stale_after_s=60)
    assert check() == (False, "the agent's main loop has not started")
    agent.loop_turned_at = time.monotonic() - 5
    assert check()[0] is True
    agent.loop_turned_at = time.monotonic() - 61
    alive, why = check()
    assert not alive and "last turned 61 s ago (limit 60 s)" in why
