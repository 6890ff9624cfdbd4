"""`farm agent`: one box's worker. Registers, heartbeats, tunes leased shards, validates libraries.

The agent keeps no durable state: its records go to the coordinator as they are measured,
its identity is the coordinator's (it re-registers under its previous id after a coordinator
restart), and its TVM RPC server is supervised so that the tracker always lists it.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.coordinator_calls import answer_unless_stopped, retry_unavailable
from agent.shard_tuning import tune_shard, validate_library
from agent.state.policy import LEASE_WAIT_S, heartbeat_due
from foundation.errors import FarmError

logger = logging.getLogger("farm.agent")

@dataclass
class AgentSettings:
    coordinator: str  # host:port of the coordinator's gRPC endpoint
    target_kinds: tuple[str, ...] = ("llvm",)
    device: int = 0
    build_workers: int | None = None
    rpc_host: str = "127.0.0.1"  # where this box's TVM RPC server listens
    rpc_port: int = 0
    work_dir: Path | None = None
    session_timeout_sec: float = 60.0
    min_repeat_ms: int = 40
    # How long a report may wait for an unreachable coordinator before the shard gives up.
    report_patience_sec: float = 120.0


@dataclass
class _RunningLease:
    job_id: str
    shard_id: str
    attempt: int
    cancelled: threading.Event = field(default_factory=threading.Event)


class Agent:
    """The agent's loops. ``run(stop)`` blocks until ``stop`` is set."""

    def __init__(self, settings: AgentSettings):
        import grpc

        from foundation.wire import CHANNEL_OPTIONS, farm_pb2_grpc

        self.settings = settings
        self.channel = grpc.insecure_channel(settings.coordinator, options=CHANNEL_OPTIONS)
        self.stub = farm_pb2_grpc.FarmAgentStub(self.channel)
        self.agent_id: str | None = None
        self.heartbeat_interval = 5.0
        self.tracker = None  # farm_pb2.TrackerAddress from Register
        self.rpc_server = None
        self.running: dict[str, _RunningLease] = {}
        self._lock = threading.Lock()
        self._pools = {}
        self.fingerprint = None
        self._last_report_at = float("-inf")  # monotonic: when a report was last accepted

    # ------------------------------------------------------------------ lifecycle

    def run(self, stop: threading.Event) -> None:
        from foundation.hardware.fingerprint import local_fingerprint
        from foundation.hardware.tvm_startup import pin_tvm_threads

        pin_tvm_threads()  # before the RPC server starts: it inherits the environment
        self.fingerprint = local_fingerprint(self.settings.target_kinds[0])
        self._register(stop)
        if stop.is_set():
            return
        self._start_rpc_server()
        beat = threading.Thread(target=self._heartbeat_loop, args=(stop,), name="farm-heartbeat", daemon=True)
        beat.start()
        try:
            self._work_loop(stop)
        finally:
            stop.set()
            for lease in list(self.running.values()):
                lease.cancelled.set()
            if self.rpc_server is not None:
                self.rpc_server.stop()
            beat.join(timeout=self.heartbeat_interval + 5)
            self.channel.close()

    def _register(self, stop: threading.Event) -> None:
        """Register (again), retrying while the coordinator is unreachable."""
        from foundation.hardware.versions import tvm_version
        from foundation.wire import farm_pb2

        fp = self.fingerprint
        request = farm_pb2.RegisterRequest(
            fingerprint_id=fp.id,
            fingerprint_summary=fp.summary,
            fingerprint_json=json.dumps(fp.to_json()),
            target_kinds=list(self.settings.target_kinds),
            hostname=socket.gethostname(),
            tvm_version=tvm_version(),
            build_workers=self.settings.build_workers or 0,
            previous_agent_id=self.agent_id or "",
        )
        reply = retry_unavailable(lambda: self.stub.Register(request, timeout=10), stop, "register")
        if reply is None:
            return
        self.agent_id = reply.agent_id
        self.heartbeat_interval = max(0.2, reply.heartbeat_interval.ToTimedelta().total_seconds())
        self.tracker = reply.tracker
        logger.info("registered as %s (fingerprint %s); tracker %s:%s key %s", self.agent_id, fp.id,
                    reply.tracker.host, reply.tracker.port, reply.tracker.key)

    def _start_rpc_server(self) -> None:
        from agent.rpc_server import SupervisedRPCServer

        self.rpc_server = SupervisedRPCServer(
            self.tracker.host, self.tracker.port, self.tracker.key,
            host=self.settings.rpc_host, port=self.settings.rpc_port,
        ).start()
        try:
            self.rpc_server.wait_until_serving(timeout=60)
        except FarmError as err:  # the watchdog keeps trying; tuning waits on the tracker
            logger.warning("RPC server not serving yet: %s", err)

    # ------------------------------------------------------------------ heartbeats

    def note_report_accepted(self) -> None:
        """A report was accepted: the coordinator counts it as a heartbeat (`heartbeat_due`)."""
        self._last_report_at = time.monotonic()

    def _heartbeat_loop(self, stop: threading.Event) -> None:
        import grpc

        from foundation.wire import farm_pb2

        last_sent_at, last_said = float("-inf"), None
        while not stop.wait(self.heartbeat_interval):
            with self._lock:
                leases = [farm_pb2.LeaseRef(job_id=r.job_id, shard_id=r.shard_id, attempt=r.attempt)
                          for r in self.running.values()]
            serving = bool(self.rpc_server and self.rpc_server.serving)
            said = (self.agent_id, serving, tuple((r.shard_id, r.attempt) for r in leases))
            now = time.monotonic()
            if not heartbeat_due(now, last_sent_at, said == last_said, self._last_report_at,
                                 self.heartbeat_interval):
                continue
            request = farm_pb2.HeartbeatRequest(agent_id=self.agent_id, running_leases=leases,
                                                rpc_server_serving=serving)
            request.sent_at.GetCurrentTime()  # the moment the lease list above was taken
            last_sent_at, last_said = now, said
            try:
                reply = self.stub.Heartbeat(request, timeout=max(2.0, self.heartbeat_interval))
            except grpc.RpcError as err:
                if err.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                    self._register(stop)
                else:
                    logger.warning("heartbeat failed (%s); will retry", err.code().name)
                continue
            for instruction in reply.instructions:
                self._follow(instruction, stop)

    def _follow(self, instruction, stop: threading.Event) -> None:
        kind = instruction.WhichOneof("instruction")
        if kind == "cancel_lease":
            with self._lock:
                running = self.running.get(instruction.cancel_lease.lease.shard_id)
            if running is not None:
                logger.info("cancelling %s: %s", running.shard_id, instruction.cancel_lease.reason)
                running.cancelled.set()
        elif kind == "re_register":
            self._register(stop)
        elif kind == "set_heartbeat_interval":
            self.heartbeat_interval = max(
                0.2, instruction.set_heartbeat_interval.heartbeat_interval.ToTimedelta().total_seconds())

    # ------------------------------------------------------------------ work

    def _work_loop(self, stop: threading.Event) -> None:
        import grpc

        from foundation.wire import farm_pb2

        kinds = list(self.settings.target_kinds)
        backoff = 0.5
        while not stop.is_set():
            try:
                validation = self.stub.LeaseValidation(farm_pb2.LeaseValidationRequest(
                    agent_id=self.agent_id, fingerprint_id=self.fingerprint.id, target_kinds=kinds), timeout=30)
                if validation.HasField("validation"):
                    self._validate(validation.validation, stop)
                    continue
                request = farm_pb2.LeaseShardRequest(
                    agent_id=self.agent_id, fingerprint_id=self.fingerprint.id, target_kinds=kinds)
                request.max_wait.FromSeconds(LEASE_WAIT_S)  # held until work comes (a long poll)
                leased = answer_unless_stopped(
                    self.stub.LeaseShard.future(request, timeout=LEASE_WAIT_S + 10), stop)
                if leased is None:
                    return  # stopped while the call was held
                if leased.HasField("shard"):
                    self._tune(leased.shard)
                    continue
                backoff = 0.5
                wait = leased.retry_after.ToTimedelta().total_seconds() if leased.HasField("retry_after") else 1.0
                stop.wait(min(max(wait, 0.0), 5.0))
            except grpc.RpcError as err:
                if err.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                    self._register(stop)
                    continue
                logger.warning("coordinator call failed (%s: %s); retrying in %.1f s",
                               err.code().name, err.details(), backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def pools_for(self):
        """The builder and runner pools for the tracker this agent measures through."""
        from foundation.meta_schedule.measure import MeasureSettings, RPCMeasure, WorkerPools

        key = (self.tracker.host, self.tracker.port, self.tracker.key)
        if key not in self._pools:
            self._pools[key] = WorkerPools(MeasureSettings(
                build_workers=self.settings.build_workers,
                min_repeat_ms=self.settings.min_repeat_ms,
                rpc=RPCMeasure(self.tracker.host, self.tracker.port, self.tracker.key,
                               session_timeout_sec=self.settings.session_timeout_sec),
            ))
        return self._pools[key]

    def _tune(self, shard) -> None:
        lease = _RunningLease(shard.job_id, shard.shard_id, shard.attempt)
        with self._lock:
            self.running[shard.shard_id] = lease
        try:
            tune_shard(self, shard, lease.cancelled)
        finally:
            with self._lock:
                self.running.pop(shard.shard_id, None)

    def _validate(self, lease, stop: threading.Event) -> None:
        logger.info("validating the library of %s (attempt %d)", lease.job_id, lease.attempt)
        validate_library(self, lease, stop)

