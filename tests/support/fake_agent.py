"""A fake agent for the coordinator's tests: the real agent's state machine with fake I/O.

Its decisions are the real agent's (agent.state.AgentState): the id it registers under, the
leases its heartbeats list, what it does with a cancel or a refused report, when it asks for
a validation or a shard. Its I/O is the test's: each method carries out the machine's next
instruction of one kind over real gRPC and hands the answer back to the machine; calls the
test skips on the way are answered "nothing" without a call (a coordinator with nothing for
it), heartbeats go when the test says, and it never tunes: its shard's tuning ends when the
test completes it or stops it. A few ``*_out_of_turn`` calls do what a real agent never
would, for tests that probe the coordinator; ``pretend_*`` feed it answers no coordinator gave.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import grpc

from agent.coordinator_calls import (
    call_failed,
    heartbeat_answered,
    heartbeat_request,
    lease_of,
    lease_shard_request,
    lease_validation_request,
    registered,
    shard_answer,
    validation_answer,
)
from agent.state import AgentState, Work
from agent.state.events import (
    AgentStarted,
    CallFailed,
    CoordinatorForgotUs,
    HeartbeatTick,
    Lease,
    NothingToLease,
    NothingToValidate,
    Registered,
    ReportAccepted,
    ReportRefused,
    RPCServerStarted,
    ShardCompleted,
    ShardLeased,
    ShardStopped,
    ShardTuned,
    ValidationDone,
    WaitOver,
)
from agent.state.instructions import (
    CompleteShard,
    LeaseShard,
    LeaseValidation,
    Register,
    SendHeartbeat,
    StartRPCServer,
    ValidateLibrary,
    Wait,
)
from foundation.wire import farm_pb2, farm_pb2_grpc

KINDS = ["llvm"]
# What each pending work instruction is answered when the test skips it: nothing to do.
_NOTHING = {LeaseValidation: NothingToValidate(), LeaseShard: NothingToLease(0.0), Wait: WaitOver()}


class FakeAgent:
    def __init__(self, channel, fingerprint, tvm_version=None):
        from foundation.hardware.versions import tvm_version as installed

        self.stub = farm_pb2_grpc.FarmAgentStub(channel)
        self.fingerprint = fingerprint
        self.tvm_version = tvm_version or installed()
        # The test says when beats fall due: each is sent. Shards are asked for without a hold.
        self.state = AgentState(lease_wait=0, skip_redundant_heartbeats=False, validate=True)
        self._lock = threading.RLock()  # the machine's: the test, its beating thread and calls feed it
        self._one_beat = threading.Lock()  # one beat in flight at a time, as the machine wants
        self._work = None  # the machine's work instruction not carried out yet
        self._register: Register | None = None
        self._poll: HeldPoll | None = None
        self._beating = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def agent_id(self) -> str:
        return self.state.agent_id

    # ------------------------------------------------------------------ the machine

    def _handle(self, *events) -> list:
        with self._lock:
            instructions = self.state.handle(*events)
            for instruction in instructions:
                if isinstance(instruction, StartRPCServer):
                    self._handle(RPCServerStarted())  # no RPC server here
                elif isinstance(instruction, Register):
                    self._register = instruction
                elif isinstance(instruction, (LeaseValidation, LeaseShard, Wait, CompleteShard, ValidateLibrary)):
                    self._work = instruction
            return instructions

    def _ask(self, kind):
        """The machine's next instruction of ``kind``, answering "nothing" to those before it."""
        with self._lock:
            if self._poll is not None and self._poll.done():
                self._poll.settle()
            while not isinstance(self._work, kind):
                if type(self._work) not in _NOTHING:
                    raise AssertionError(f"{self.state!r} would not {kind.__name__} now")
                work, self._work = self._work, None
                self._handle(_NOTHING[type(work)])
            work, self._work = self._work, None
            return work

    def _call(self, name: str, call):
        try:
            return call()
        except grpc.RpcError as err:
            self._handle(call_failed(name, err))
            raise

    # ------------------------------------------------------------------ registration and heartbeats

    def register(self):
        with self._lock:
            self._handle(AgentStarted() if self.state.work is Work.NOT_STARTED else CoordinatorForgotUs("test"))
            ask, self._register = self._register, None
        assert ask is not None, f"{self.state!r} would not register now"
        reply = self._call("Register", lambda: self.stub.Register(farm_pb2.RegisterRequest(
            fingerprint_id=self.fingerprint.id, fingerprint_summary=self.fingerprint.summary,
            fingerprint_json=json.dumps(self.fingerprint.to_json()), target_kinds=KINDS,
            hostname="fake", tvm_version=self.tvm_version, previous_agent_id=ask.previous_agent_id), timeout=10))
        self._handle(registered(reply))
        return reply

    def pretend_registered_as(self, agent_id: str) -> None:
        """As if the coordinator had registered this agent as ``agent_id`` (it did not)."""
        with self._lock:
            self._handle(CoordinatorForgotUs("test"))
            self._register = None
            self._handle(Registered(agent_id, self.state.heartbeat_interval, self.state.tracker))

    def _tick(self) -> SendHeartbeat | None:
        beats = [i for i in self._handle(HeartbeatTick(time.monotonic())) if isinstance(i, SendHeartbeat)]
        return beats[0] if beats else None

    def heartbeat(self):
        """One heartbeat now (none while registering); the coordinator's instructions."""
        with self._one_beat:
            beat = self._tick()
            if beat is None:
                return []
            reply = self._call("Heartbeat", lambda: self.stub.Heartbeat(heartbeat_request(beat), timeout=10))
            self._handle(heartbeat_answered(reply))
            return reply.instructions

    def heartbeat_future(self, timeout: float):
        """A heartbeat in flight (a grpc future); its answer goes to the machine when it comes."""
        beat = self._tick()
        future = self.stub.Heartbeat.future(heartbeat_request(beat), timeout=timeout)

        def answered(call):
            try:
                self._handle(heartbeat_answered(call.result()))
            except grpc.RpcError as err:
                self._handle(call_failed("Heartbeat", err))

        future.add_done_callback(answered)
        return future

    def keep_beating(self, on: bool = True):
        """Heartbeat every 0.2 s in the background while ``on``."""
        if self._thread is None:
            def loop():
                while not self._stop.wait(0.2):
                    if self._beating.is_set():
                        self.heartbeat()
            self._thread = threading.Thread(target=loop, daemon=True)
            self._thread.start()
        (self._beating.set if on else self._beating.clear)()

    def close(self):
        """Stop the background heartbeats, waiting for one in flight: it would otherwise fail
        against a coordinator stopped right after, in a thread no test reads."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    # ------------------------------------------------------------------ shards

    def lease(self):
        """Ask for a shard, answered at once; the shard granted (now tuned), or None."""
        request = lease_shard_request(self._ask(LeaseShard), self.fingerprint.id, KINDS)
        reply = self._call("LeaseShard", lambda: self.stub.LeaseShard(request, timeout=30))
        self._handle(shard_answer(reply))
        return self.leased(reply)

    def held_lease(self, max_wait: float, timeout: float) -> HeldPoll:
        """A long-polled LeaseShard in flight, as the real agent sends; its answer goes to the
        machine when the test reads it (or, if it is left, when the agent next asks)."""
        ask = replace(self._ask(LeaseShard), max_wait=max_wait)
        self._poll = HeldPoll(self, self.stub.LeaseShard.future(
            lease_shard_request(ask, self.fingerprint.id, KINDS), timeout=timeout))
        return self._poll

    @staticmethod
    def leased(reply):
        """The shard a LeaseShard reply grants, or None."""
        return reply.shard if reply.HasField("shard") else None

    def pretend_leased(self, shard, attempt: int) -> None:
        """As if the coordinator had granted this agent ``attempt`` of ``shard`` (it did not)."""
        self._ask(LeaseShard)
        self._handle(ShardLeased(Lease(shard.job_id, shard.shard_id, attempt), shard))

    def report(self, shard, factors=(2, 4), attempt=None):
        attempt = shard.attempt if attempt is None else attempt
        records = [farm_pb2.MeasuredRecord(task_name=t.name, workload_shash=t.workload_shash,
                                           tuning_record_json=record_json(t, shard.target, f))
                   for t in shard.tasks for f in factors]
        progress = [farm_pb2.TaskProgress(shard_id=shard.shard_id, task_name=t.name, trials=len(factors),
                                          budget=shard.budget.max_trials_per_task, run_errors=1, best_us=10.0)
                    for t in shard.tasks]
        reply = self.stub.ReportRecords(farm_pb2.ReportRecordsRequest(
            agent_id=self.agent_id, shard_id=shard.shard_id, attempt=attempt, records=records,
            progress=progress), timeout=30)
        lease = Lease(shard.job_id, shard.shard_id, attempt)
        self._handle(ReportAccepted(time.monotonic()) if reply.accepted else ReportRefused(lease, reply.reason))
        return reply

    def complete(self, shard):
        """The shard's tuning ended: complete it, as the machine says."""
        self._handle(ShardTuned(lease_of(shard)))
        call = self._ask(CompleteShard)
        reply = self._call("CompleteShard", lambda: self._complete(call.lease))
        self._handle(ShardCompleted(call.lease))
        return reply

    def stop_tuning(self, shard) -> None:
        """The shard's tuning, told to stop, has stopped."""
        self._handle(ShardStopped(lease_of(shard)))

    def _complete(self, lease: Lease):
        return self.stub.CompleteShard(farm_pb2.CompleteShardRequest(
            agent_id=self.agent_id, shard_id=lease.shard_id, attempt=lease.attempt), timeout=30)

    # ------------------------------------------------------------------ out of turn

    def lease_out_of_turn(self):
        """Ask for a shard while holding one, as a real agent never does; not told to the machine."""
        reply = self.stub.LeaseShard(farm_pb2.LeaseShardRequest(
            agent_id=self.agent_id, fingerprint_id=self.fingerprint.id, target_kinds=KINDS), timeout=30)
        return self.leased(reply)

    def held_lease_out_of_turn(self, max_wait: float, timeout: float):
        """A long poll while holding a shard (a grpc future); not told to the machine."""
        ask = LeaseShard(self.agent_id, max_wait=max_wait, timeout=timeout)
        return self.stub.LeaseShard.future(lease_shard_request(ask, self.fingerprint.id, KINDS), timeout=timeout)

    def complete_out_of_turn(self, shard):
        """Complete a shard the machine would not (its lease was cancelled)."""
        return self._complete(lease_of(shard))

    # ------------------------------------------------------------------ validations

    def validate(self, outcome=None):
        """Lease a validation and do what agents do with it (foundation.runtime.validation.check_library);
        with ``outcome`` (an OutputCheck), report that instead, as of a library that computes it."""
        from foundation.models.loaded import Fill, TensorSpec, random_inputs, random_weights
        from foundation.runtime.validation import check_library

        request = lease_validation_request(self._ask(LeaseValidation), self.fingerprint.id, KINDS)
        reply = self._call("LeaseValidation", lambda: self.stub.LeaseValidation(request, timeout=60))
        self._handle(validation_answer(reply))
        if not reply.HasField("validation"):
            return None
        lease = self._ask(ValidateLibrary).lease

        def spec(s):
            return TensorSpec(s.name, tuple(s.shape), s.dtype,
                              Fill.from_json(json.loads(s.fill_json)) if s.fill_json else None)

        if outcome is None:
            check = check_library(
                lease.library, lease.reference_library, "llvm",
                random_inputs([spec(s) for s in lease.inputs], lease.seed),
                random_weights([spec(s) for s in lease.weight_specs], lease.seed), runs=lease.runs,
            )
            v = check.validation
            outcome = farm_pb2.OutputCheck(passed=v.passed, max_abs_err=v.max_abs_err, max_rel_err=v.max_rel_err,
                                           rtol=v.rtol, atol=v.atol, reason=v.reason or "")
            stats = farm_pb2.LatencyStats(mean_ms=check.latency.mean_ms, median_ms=check.latency.median_ms,
                                          std_ms=check.latency.std_ms, runs=check.latency.runs)
        else:
            stats = farm_pb2.LatencyStats(mean_ms=1.0, median_ms=1.0, std_ms=0.0, runs=lease.runs)
        reported = self.stub.ReportValidation(farm_pb2.ReportValidationRequest(
            agent_id=self.agent_id, validation_id=lease.validation_id, attempt=lease.attempt, check=outcome,
            latency=stats), timeout=30)
        self._handle(ValidationDone())
        return lease, reported


class HeldPoll:
    """A held LeaseShard (its grpc future, which it stands for); the answer goes to the agent's
    machine once: when the test reads it, or when the agent asks again after it ended."""

    def __init__(self, agent: FakeAgent, future):
        self._agent = agent
        self._future = future
        self._settled = False

    def done(self) -> bool:
        return self._future.done()

    def cancelled(self) -> bool:
        return self._future.cancelled()

    def cancel(self) -> bool:
        return self._future.cancel()

    def add_done_callback(self, callback) -> None:
        self._future.add_done_callback(lambda _future: callback(self))

    def result(self, timeout=None):
        try:
            reply = self._future.result(timeout)
        except (grpc.RpcError, grpc.FutureCancelledError):
            self.settle()
            raise
        self.settle()
        return reply

    def settle(self) -> None:
        with self._agent._lock:
            if self._settled:
                return
            self._settled = True
            if self._agent._poll is self:
                self._agent._poll = None
            if self._future.cancelled():
                self._agent._handle(CallFailed("LeaseShard", "CANCELLED"))
                return
            try:
                reply = self._future.result()
            except grpc.RpcError as err:
                self._agent._handle(call_failed("LeaseShard", err))
                return
            self._agent._handle(shard_answer(reply))


def record_json(task, target_json: str, factor: int) -> str:
    """A real TuningRecord of ``task``: split the first loop of its first block by ``factor``."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from foundation.hardware.targets import to_tvm_target

    mod = tvm.ir.load_json(task.mod_json)
    sch = tvm.s_tir.Schedule(mod)
    block = sch.get_child_blocks(sch.get_sblock("root"))[0]
    sch.split(sch.get_loops(block)[0], [None, factor])
    record = TuningRecord(sch.trace, Workload(mod), [1e-5 * factor], to_tvm_target(json.loads(target_json)),
                          ArgInfo.from_prim_func(mod["main"]))
    return json.dumps(record.as_json())
