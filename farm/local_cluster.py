"""A whole farm on this box: coordinator (with its TVM RPC tracker) and agents as real processes.

Used by the cluster tests (in the spirit of dask's gen_cluster) and by bench/. Processes run on
free loopback ports; every one carries a marker in its environment, so ``close()`` can prove
that nothing was left behind, children included.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

MARKER = "FARM_TEST_CLUSTER"
# What a farm process gets to stop after SIGTERM: more than the coordinator's grace (10 s) and
# the agent's (15 s), less than the 45 s the deployment recipes give before SIGKILL.
STOP_WAIT_S = 25


# Ports picked for processes yet to start come from below the kernel's ephemeral range (32768 and
# up on Linux), where nothing binding port 0 lands, in a slice of their own per pytest-xdist
# worker ("gw3"), so that no other test's process takes one between the pick and the bind.
PICKED_PORTS = range(20000, 32000)
PORTS_PER_WORKER = 1000
_next_pick = random.randrange(PORTS_PER_WORKER)  # where this process starts in its slice


def free_port() -> int:
    """A loopback port nothing listens on, for a process to bind later.

    Picks go round this worker's slice in turn: a port handed out and not yet bound (the
    coordinator's, say, while its metrics port is picked) is not handed out again until the
    slice has come round, by when the test that wanted it is long over.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    slot = int(worker[2:]) if worker[2:].isdigit() else len(PICKED_PORTS) // PORTS_PER_WORKER - 1
    first = PICKED_PORTS.start + (slot * PORTS_PER_WORKER) % len(PICKED_PORTS)
    global _next_pick
    for _ in range(PORTS_PER_WORKER):
        port = first + _next_pick % PORTS_PER_WORKER
        _next_pick += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {first}-{first + PORTS_PER_WORKER - 1}")


class Cluster:
    """Handles to a coordinator and agents; ``close()`` stops them all and checks for leftovers."""

    def __init__(self, root: Path, registry_url: str, *, lease_ttl: float = 6.0, heartbeat: float = 1.0,
                 max_attempts: int | None = None, grace: float | None = None, token: str | None = None,
                 tls: tuple[Path, Path, Path] | None = None, metrics: bool = False,
                 coordinator_options: tuple[str, ...] = ()):
        """``token``: the farm's shared token, in every process's FARM_TOKEN. ``tls``: (CA,
        certificate, key) PEM files: the coordinator serves TLS with the certificate (and its
        health service in plaintext on ``health_port``), the others trust the CA. ``metrics``:
        every process serves Prometheus metrics (``metrics_ports``). ``coordinator_options``: more
        `farm coordinator` options, as given on its command line."""
        self.root = root
        self.registry_url = registry_url
        self.marker = uuid.uuid4().hex
        self.port = free_port()
        self.tracker_port = free_port()
        self.lease_ttl = lease_ttl
        self.heartbeat = heartbeat
        self.max_attempts = max_attempts  # None: the coordinator's default
        self.grace = grace  # seconds in-flight calls get on SIGTERM; None: the default
        self.token = token
        self.tls = tls
        self.health_port = free_port() if tls else None
        self.metrics_ports: dict[str, int] | None = {} if metrics else None
        self.coordinator_options = tuple(coordinator_options)
        self.coordinator: subprocess.Popen | None = None
        self.agents: dict[str, subprocess.Popen] = {}
        self.exe = str(Path(sys.executable).with_name("farm"))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self, home: str) -> dict:
        env = {**os.environ, MARKER: self.marker, "FARM_HOME": str(self.root / home)}
        for name in ("FARM_REGISTRY", "FARM_REGISTRY_FILE", "FARM_COORDINATOR", "FARM_TOKEN", "FARM_TOKEN_FILE"):
            env.pop(name, None)
        if self.token is not None:
            env["FARM_TOKEN"] = self.token
        for name in ("FARM_TLS_CA", "FARM_TLS_CERT", "FARM_TLS_KEY", "FARM_TLS_CLIENT_CA",
                     "FARM_COORDINATOR_TLS_CLIENT_CA", "FARM_METRICS_LISTEN"):
            env.pop(name, None)
        if self.tls is not None and home != "coordinator":
            env["FARM_TLS_CA"] = str(self.tls[0])
        return env

    def _served(self, name: str) -> list[str]:
        """The options that make process ``name`` serve its metrics, when the cluster wants them."""
        if self.metrics_ports is None:
            return []
        port = self.metrics_ports.setdefault(name, free_port())
        return ["--metrics-listen", f"127.0.0.1:{port}"]

    def _spawn(self, name: str, args: list[str], home: str, affinity: set[int] | None = None) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")
        # taskset sets the CPU list and execs the command (same pid), so everything it starts
        # inherits the list; a preexec_fn would run Python in a forked child of a threaded
        # process (the tests hold gRPC channels).
        pin = [] if affinity is None else ["taskset", "-c", ",".join(str(c) for c in sorted(affinity))]
        return subprocess.Popen([*pin, self.exe, *args], env=self.env(home), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start_coordinator(self, timeout: float = 60.0) -> None:
        self.coordinator = self._spawn("coordinator", [
            "coordinator", "--listen", self.address, "--registry", self.registry_url,
            "--tracker-listen", f"127.0.0.1:{self.tracker_port}",
            "--heartbeat-interval", str(self.heartbeat), "--lease-ttl", str(self.lease_ttl),
            *(["--max-attempts", str(self.max_attempts)] if self.max_attempts is not None else []),
            *(["--grace", str(self.grace)] if self.grace is not None else []),
            *self._served("coordinator"),
            *self.coordinator_options,
            *([] if self.tls is None else ["--tls-cert", str(self.tls[1]), "--tls-key", str(self.tls[2]),
                                           "--health-listen", f"127.0.0.1:{self.health_port}"]),
        ], "coordinator")
        self.wait_serving(timeout)

    def wait_serving(self, timeout: float) -> None:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.coordinator.poll() is not None:
                raise AssertionError(f"coordinator exited {self.coordinator.returncode}:\n{self.log('coordinator')}")
            health = self.address if self.health_port is None else f"127.0.0.1:{self.health_port}"
            with grpc.insecure_channel(health) as channel:
                try:
                    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
            time.sleep(0.3)
        raise AssertionError(f"coordinator not serving after {timeout} s:\n{self.log('coordinator')}")

    def start_agent(self, name: str, affinity: set[int] | None = None, grace: float | None = None,
                    options: tuple[str, ...] = ()) -> subprocess.Popen:
        """An agent; ``affinity`` (CPU numbers) limits the CPUs it and its children may use,
        which changes its fingerprint (the cores it can use are part of it); ``grace``: its --grace;
        ``options``: more `farm agent` options, as given on its command line."""
        proc = self._spawn(name, ["agent", "--coordinator", self.address, "--build-workers", "1",
                                  *([] if grace is None else ["--grace", str(grace)]),
                                  *self._served(name), *options], name, affinity)
        self.agents[name] = proc
        return proc

    def ask(self, call):
        """``call(client)`` on a CoordinatorClient of this cluster, made in this process: a
        `farm` process to poll with costs a second of CPU a call, and the waits poll often."""
        from farm.client import CoordinatorClient
        from foundation.wire.access import ChannelAccess

        ca = None if self.tls is None else Path(self.tls[0]).read_bytes()
        client = CoordinatorClient(self.address, timeout=10.0,
                                   access=ChannelAccess(token=self.token, tls=ca is not None, ca=ca))
        try:
            return call(client)
        finally:
            client.close()

    def agents_now(self) -> list[dict]:
        """What `farm agents --json` lists."""
        from farm.client import agent_json

        return self.ask(lambda client: [agent_json(a) for a in client.list_agents()])

    def job(self, job_id: str) -> dict:
        """What `farm status JOB --json` prints."""
        from farm.client import job_json

        return self.ask(lambda client: job_json(client.get_job(job_id)))

    def wait_agents(self, count: int, timeout: float = 90.0) -> list[dict]:
        """Until ``count`` agents are registered and their RPC servers serve."""
        from foundation.errors import FarmError

        deadline = time.monotonic() + timeout
        agents: list[dict] = []
        while time.monotonic() < deadline:
            try:
                agents = self.agents_now()
            except FarmError:
                agents = []
            serving = [a for a in agents if a.get("rpc_server_serving")]
            if len(serving) >= count:
                return agents
            time.sleep(0.5)
        logs = "\n".join(f"--- {n}\n{self.log(n)[-3000:]}" for n in self.agents)
        raise AssertionError(f"{count} serving agents expected, got {agents}\n{logs}")

    def farm(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        env = {**self.env("client"), "FARM_COORDINATOR": self.address}
        proc = subprocess.run([self.exe, *args], env=env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"farm {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Signal a process alone (not its group): its children must be handled by the farm."""
        proc.send_signal(sig)
        proc.wait(timeout=30)

    def stop_coordinator(self, sig: int = signal.SIGTERM) -> None:
        if self.coordinator is not None and self.coordinator.poll() is None:
            self.coordinator.send_signal(sig)
            try:
                self.coordinator.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.coordinator.kill()
                self.coordinator.wait()

    def leftovers(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.environ().get(MARKER) == self.marker:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def close(self) -> list[str]:
        """Stop everything (SIGTERM, then SIGKILL); describe what had to be killed: a farm
        process still there STOP_WAIT_S after SIGTERM (its grace is shorter), and leftovers
        (pid, parent, command line)."""
        described = []
        for proc in [*self.agents.values(), self.coordinator]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in [*self.agents.values(), self.coordinator]:
            if proc is not None:
                try:
                    proc.wait(timeout=STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    described.append(f"{proc.pid} did not stop within {STOP_WAIT_S} s of SIGTERM: "
                                     f"{' '.join(map(str, proc.args))[:200]}")
        deadline = time.monotonic() + 10
        stray = self.leftovers()
        while stray and time.monotonic() < deadline:
            time.sleep(0.5)
            stray = self.leftovers()
        for proc in stray:
            try:
                described.append(f"{proc.pid} (parent {proc.ppid()}): {' '.join(proc.cmdline())[:200]}")
                proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                described.append(str(proc.pid))
        return described
