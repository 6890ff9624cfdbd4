"""`farm agent`: one box's worker. Registers, heartbeats, tunes leased shards, validates libraries.

The agent keeps no durable state: its records go to the coordinator as they are measured,
its identity is the coordinator's (it re-registers under its previous id after a coordinator
restart), and its TVM RPC server is supervised so that the tracker always lists it.

This module decides nothing: `Agent.run` feeds events to the agent's state machine
(agent.state.AgentState) on one thread and carries out the instructions it returns, with gRPC
calls, threads (one per call, tuning or validation under way) and timers, whose outcomes are
posted back as the next events.
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from functools import partial, singledispatchmethod
from pathlib import Path

import grpc

from agent.coordinator_calls import (
    answer_unless_stopped,
    call_failed,
    heartbeat_answered,
    heartbeat_request,
    lease_shard_request,
    lease_validation_request,
    registered,
    retry_unavailable,
    shard_answer,
    validation_answer,
)
from agent.cost_models import CostModelCache
from agent.shard_tuning import tune_shard, validate_library
from agent.state import AgentState
from agent.state.events import (
    AgentStarted,
    CallFailed,
    Event,
    HeartbeatTick,
    RPCServerStarted,
    ShardCompleted,
    ShardFailureReported,
    StopRequested,
    ValidationDone,
    WaitOver,
)
from agent.state.instructions import (
    CancelShard,
    CompleteShard,
    FailShard,
    Instruction,
    LeaseShard,
    LeaseValidation,
    Register,
    ScheduleHeartbeat,
    SendHeartbeat,
    Shutdown,
    StartRPCServer,
    StartShard,
    ValidateLibrary,
    Wait,
)
from foundation.domain.timing_context import TimingContext
from foundation.errors import FarmError
from foundation.hardware.device_features import DEVICE_KEY
from foundation.logs import log_ids, set_process_ids
from foundation.meta_schedule.measure import min_repeat_ms_setting
from foundation.meta_schedule.timing_context import timing_context_setting
from foundation.wire.access import ChannelAccess, open_channel
from foundation.wire.handshake import tls_failure

logger = logging.getLogger("farm.agent")

# Deadlines of the calls whose length the machine does not set.
REGISTER_TIMEOUT_S = 10
CALL_TIMEOUT_S = 30
RPC_SERVER_START_TIMEOUT_S = 60


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
    min_repeat_ms: int = field(default_factory=min_repeat_ms_setting)  # FARM_MIN_REPEAT_MS, else 40
    # The cache state CPU candidates are timed in: FARM_TIMING_CONTEXT, else (None) the one the agent's
    # fingerprint's shipped pack chose, else warm (foundation.domain.timing_context).
    timing_context: TimingContext | None = field(default_factory=timing_context_setting)
    # How long a report may wait for an unreachable coordinator before the shard gives up.
    report_patience_sec: float = 120.0
    access: ChannelAccess | None = None  # token and TLS to present (foundation.wire.access)
    # How long work under way (a batch being measured, a report, a validation) may take to end
    # after a stop before the agent leaves without it: a batch whose tracker went down with the
    # coordinator would otherwise hold the agent for a session timeout per candidate.
    stop_grace_sec: float = 15.0


# gRPC waits longer and longer between its tries to reconnect to a coordinator that is away (up
# to 2 minutes by default), failing every call meanwhile: an agent would then stay silent long
# after a restarted coordinator came back, and lose its lease to the TTL. A few seconds at most.
RECONNECT_BACKOFF_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 500), ("grpc.min_reconnect_backoff_ms", 500),
                             ("grpc.max_reconnect_backoff_ms", 2000)]


def coordinator_channel(address: str, access: ChannelAccess | None = None) -> grpc.Channel:
    """The agent's channel to the coordinator at ``address`` (host:port): made here only, so
    that credentials (TLS, a token: foundation.wire.access) are added in one place."""
    from foundation.wire import CHANNEL_OPTIONS

    return open_channel(address, access, options=[*CHANNEL_OPTIONS, *RECONNECT_BACKOFF_OPTIONS])


def _about(lease):
    """Records logged in this block (or decorated function) name the lease's job and shard."""
    return log_ids(job_id=lease.job_id, shard_id=lease.shard_id)


@dataclass(frozen=True)
class _Crashed:
    """A thread of the agent raised what no event covers (a bug, or a broken TVM): the agent ends."""

    error: BaseException


class Agent:
    """The agent's executor. ``run(stop)`` blocks until ``stop`` is set and the work under way
    ended, or the stop's grace ran out (see ``run``)."""

    def __init__(self, settings: AgentSettings):
        from foundation.wire import farm_pb2_grpc

        self.settings = settings
        self.channel = coordinator_channel(settings.coordinator, settings.access)
        # A failed handshake is told in words by trying one more (foundation.wire.handshake).
        self.explain_tls = partial(tls_failure, address=settings.coordinator, access=settings.access)
        self.stub = farm_pb2_grpc.FarmAgentStub(self.channel)
        self.state = AgentState()
        self.fingerprint = None
        self.rpc_server = None
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._cancelled: dict[str, threading.Event] = {}  # shard id -> its tuning's stop flag
        self._timers: dict[str, threading.Timer] = {}  # "beat" and "work": one each at most
        self._pools = {}
        self.cost_models = CostModelCache()
        self.loop_turned_at: float | None = None  # liveness (agent.metrics.LoopLiveness): set each turn

    @property
    def agent_id(self) -> str:
        return self.state.agent_id

    @property
    def tracker(self):
        """farm_pb2.TrackerAddress from the last registration."""
        return self.state.tracker

    def post(self, event: Event | _Crashed) -> None:
        """Hand the state machine an event (from any thread); `run` takes them in order."""
        self._events.put(event)

    # ------------------------------------------------------------------ the loop

    def run(self, stop: threading.Event) -> bool:
        """Serve until ``stop``; True if work under way was left behind when the stop's grace ran
        out. Its threads may then still be blocked in TVM's worker pools, which an ordinary
        interpreter exit waits for: the caller ends the process (os._exit) instead."""
        from foundation.hardware.fingerprint import local_fingerprint
        from foundation.hardware.tvm_startup import pin_tvm_threads

        pin_tvm_threads()  # before the RPC server starts: it inherits the environment
        # The GPU the agent measures on (--device cuda:N), not whichever CUDA numbers first.
        self.fingerprint = local_fingerprint(self.settings.target_kinds[0], self.settings.device)
        self._stop = stop
        self.post(AgentStarted())
        shutdown = None
        leave_by = None  # once stopped: when work under way stops being waited for
        abandoned = False
        try:
            while shutdown is None:
                self.loop_turned_at = time.monotonic()
                if stop.is_set() and not self.state.stopping:
                    event = StopRequested()
                    leave_by = time.monotonic() + self.settings.stop_grace_sec
                elif leave_by is not None and time.monotonic() > leave_by:
                    logger.warning("the work under way did not end within %g s of the stop; leaving without it "
                                   "(its lease lapses and the coordinator hands the shard on)",
                                   self.settings.stop_grace_sec)
                    shutdown, abandoned = Shutdown(None), True
                    break
                else:
                    try:
                        event = self._events.get(timeout=0.25)
                    except queue.Empty:
                        continue
                if isinstance(event, _Crashed):
                    raise event.error
                for instruction in self.state.handle(event):
                    if isinstance(instruction, Shutdown):
                        shutdown = instruction
                        break
                    self._carry_out(instruction)
        finally:
            stop.set()  # calls and retries under way give up
            for cancelled in list(self._cancelled.values()):
                cancelled.set()
            for timer in self._timers.values():
                timer.cancel()
            if self.rpc_server is not None:
                self.rpc_server.stop()
            self._close_pools(wait=not abandoned)
            self.channel.close()
        if shutdown.error:
            raise FarmError(shutdown.error)
        return abandoned

    def _close_pools(self, wait: bool = True) -> None:
        """Kill the builder and runner workers, a build in flight included: a worker busy
        compiling when the agent exits would otherwise run on, orphaned, until its build ends.
        The processes go first: closing a pool whose worker a tuning thread is still reading
        from waits on that read. With work left behind (``wait`` False) the pools are not
        closed at all: closing one waits for the candidates still queued in it."""
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                child.kill()
            except psutil.Error:
                pass
        pools, self._pools = self._pools, {}
        for worker_pools in pools.values() if wait else ():
            try:
                worker_pools.close()
            except Exception:
                logger.warning("stopping the agent's worker pools failed", exc_info=True)

    def _in_thread(self, name: str, work, *args) -> None:
        def run():
            try:
                work(*args)
            except Exception as err:  # handed to run(), which raises it
                self.post(_Crashed(err))

        threading.Thread(target=run, name=f"farm-{name}", daemon=True).start()

    def _call(self, name: str, call, answered) -> None:
        """Make a call (in this thread); post the event its answer or failure is."""
        try:
            reply = call()
        except grpc.RpcError as err:
            self.post(call_failed(name, err, self.explain_tls))
            return
        self.post(answered(reply))

    def _after(self, timer: str, seconds: float, post) -> None:
        self._timers[timer] = threading.Timer(seconds, post)
        self._timers[timer].daemon = True
        self._timers[timer].start()

    # ------------------------------------------------------------------ instructions

    @singledispatchmethod
    def _carry_out(self, instruction: Instruction) -> None:
        raise TypeError(f"no way to carry out {instruction!r}")

    @_carry_out.register
    def _(self, instruction: Register) -> None:
        if instruction.why:
            logger.warning(instruction.why)
        self._in_thread("register", self._register, instruction)

    def _register(self, instruction: Register) -> None:
        from foundation.hardware.versions import tvm_version
        from foundation.wire import farm_pb2

        if instruction.after and self._stop.wait(instruction.after):
            return
        fp = self.fingerprint
        request = farm_pb2.RegisterRequest(
            fingerprint_id=fp.id, fingerprint_summary=fp.summary, fingerprint_json=json.dumps(fp.to_json()),
            target_kinds=list(self.settings.target_kinds), hostname=socket.gethostname(),
            tvm_version=tvm_version(), build_workers=self.settings.build_workers or 0,
            previous_agent_id=instruction.previous_agent_id,
        )

        def answered(reply):
            set_process_ids(agent_id=reply.agent_id)
            logger.info("registered as %s (fingerprint %s); tracker %s:%s key %s", reply.agent_id, fp.id,
                        reply.tracker.host, reply.tracker.port, reply.tracker.key)
            return registered(reply)

        self._call("Register", lambda: self.stub.Register(request, timeout=REGISTER_TIMEOUT_S), answered)

    @_carry_out.register
    def _(self, instruction: StartRPCServer) -> None:
        from agent.rpc_server import SupervisedRPCServer
        from foundation.meta_schedule.forked_workers import launcher_forked_here

        # Here, not in a thread: a server started after the agent shut down would outlive it.
        tracker = instruction.tracker
        self.rpc_server = SupervisedRPCServer(
            tracker.host, tracker.port, tracker.key, host=self.settings.rpc_host, port=self.settings.rpc_port,
            # Where the agent forked its workers' zygote (farm agent on a CPU), the zygote forks the
            # server too: it has imported TVM, which a new Python would spend a CPU-second on.
            launcher=launcher_forked_here(self.settings.target_kinds[0]),
        ).start()
        try:
            self.rpc_server.wait_until_serving(timeout=RPC_SERVER_START_TIMEOUT_S, stop=self._stop)
        except FarmError as err:  # the watchdog keeps trying; tuning waits on the tracker
            logger.warning("RPC server not serving yet: %s", err)
        self.post(RPCServerStarted())

    @_carry_out.register
    def _(self, instruction: ScheduleHeartbeat) -> None:
        if instruction.why:
            logger.warning(instruction.why)
        self._after("beat", instruction.seconds, lambda: self.post(HeartbeatTick(
            time.monotonic(), bool(self.rpc_server and self.rpc_server.serving))))

    @_carry_out.register
    def _(self, instruction: SendHeartbeat) -> None:
        self._in_thread("heartbeat", self._call, "Heartbeat",
                        lambda: self.stub.Heartbeat(heartbeat_request(instruction), timeout=instruction.timeout),
                        heartbeat_answered)

    @_carry_out.register
    def _(self, instruction: LeaseValidation) -> None:
        request = lease_validation_request(instruction, self.fingerprint.id, self.settings.target_kinds)
        self._in_thread("lease", self._call, "LeaseValidation",
                        lambda: self.stub.LeaseValidation(request, timeout=CALL_TIMEOUT_S), validation_answer)

    @_carry_out.register
    def _(self, instruction: LeaseShard) -> None:
        request = lease_shard_request(instruction, self.fingerprint.id, self.settings.target_kinds)

        def poll():
            try:
                reply = answer_unless_stopped(self.stub.LeaseShard.future(request, timeout=instruction.timeout),
                                              self._stop)
            except grpc.RpcError as err:
                self.post(call_failed("LeaseShard", err, self.explain_tls))
                return
            if reply is not None:  # None: cancelled, as the agent stops
                self.post(shard_answer(reply))

        self._in_thread("lease", poll)

    @_carry_out.register
    def _(self, instruction: Wait) -> None:
        if instruction.why:
            logger.warning(instruction.why)
        self._after("work", instruction.seconds, lambda: self.post(WaitOver()))

    @_carry_out.register
    def _(self, instruction: StartShard) -> None:
        cancelled = self._cancelled[instruction.lease.shard_id] = threading.Event()

        def tune():
            try:
                with _about(instruction.lease):
                    self.post(tune_shard(self, instruction.shard, cancelled))
            finally:
                self._cancelled.pop(instruction.lease.shard_id, None)

        self._in_thread("tune", tune)

    @_carry_out.register
    def _(self, instruction: CancelShard) -> None:
        with _about(instruction.lease):
            logger.info("cancelling %s: %s", instruction.lease.shard_id, instruction.reason)
        cancelled = self._cancelled.get(instruction.lease.shard_id)
        if cancelled is not None:
            cancelled.set()

    @_carry_out.register
    def _(self, instruction: CompleteShard) -> None:
        from foundation.wire import farm_pb2

        lease = instruction.lease
        request = farm_pb2.CompleteShardRequest(agent_id=instruction.agent_id, shard_id=lease.shard_id,
                                                attempt=lease.attempt, tasks=list(instruction.tasks),
                                                warm_start=instruction.warm_start)

        @_about(lease)
        def complete():
            # Tried again while the coordinator is away (restarting, or without its registry), as
            # reports are: a completion it never hears lets the lease lapse, and the shard is
            # tuned again under another attempt.
            try:
                reply = retry_unavailable(lambda: self.stub.CompleteShard(request, timeout=CALL_TIMEOUT_S),
                                          self._stop, f"complete {lease.shard_id}",
                                          patience=self.settings.report_patience_sec, explain_tls=self.explain_tls)
            except grpc.RpcError as err:
                self.post(call_failed("CompleteShard", err, self.explain_tls))
                return
            if reply is None:  # the agent stops
                self.post(CallFailed("CompleteShard", "CANCELLED", "the agent is stopping"))
                return
            logger.info("%s done: %d trials in %.1f s%s", lease.shard_id, instruction.trials, instruction.seconds,
                        "" if reply.accepted else f" (not accepted: {reply.reason})")
            self.post(ShardCompleted(lease))

        self._in_thread("complete", complete)

    @_carry_out.register
    def _(self, instruction: FailShard) -> None:
        from foundation.wire import farm_pb2

        lease = instruction.lease
        request = farm_pb2.FailShardRequest(agent_id=instruction.agent_id, shard_id=lease.shard_id,
                                            attempt=lease.attempt, reason=instruction.reason,
                                            tasks=list(instruction.tasks))

        @_about(lease)
        def report():
            try:
                self.stub.FailShard(request, timeout=CALL_TIMEOUT_S)
            except grpc.RpcError as err:
                logger.warning("could not report the failure of %s: %s", lease.shard_id, err.details())
                self.post(call_failed("FailShard", err, self.explain_tls))
                return
            self.post(ShardFailureReported(lease))

        self._in_thread("fail", report)

    @_carry_out.register
    def _(self, instruction: ValidateLibrary) -> None:
        lease = instruction.lease

        def validate():
            with log_ids(job_id=lease.job_id):
                logger.info("validating the library of %s (attempt %d)", lease.job_id, lease.attempt)
                validate_library(self, lease, self._stop)
            self.post(ValidationDone())

        self._in_thread("validate", validate)

    # ------------------------------------------------------------------ what a lease's work needs

    def pools_for(self):
        """The builder and runner pools for the tracker this agent measures through."""
        from agent.metrics import MeasureMetrics
        from foundation.meta_schedule.measure import MeasureSettings, RPCMeasure, WorkerPools

        key = (self.tracker.host, self.tracker.port, self.tracker.key)
        if key not in self._pools:
            self._pools[key] = WorkerPools(MeasureSettings(
                build_workers=self.settings.build_workers,
                min_repeat_ms=self.settings.min_repeat_ms,
                timing_context=self.settings.timing_context,
                l2_kib=self.fingerprint.details.get(DEVICE_KEY, {}).get("l2_kib"),
                fingerprint_id=self.fingerprint.id,
                rpc=RPCMeasure(self.tracker.host, self.tracker.port, self.tracker.key,
                               session_timeout_sec=self.settings.session_timeout_sec),
            ), observer=MeasureMetrics(self.fingerprint.id, self.settings.target_kinds))
        return self._pools[key]
