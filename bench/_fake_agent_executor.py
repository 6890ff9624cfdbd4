"""One fake agent of bench/coordinator_scale.py: the real agent's state machine, fake I/O.

`FakeAgent` feeds its `agent.state.AgentState` events and carries out the instructions it
returns as the real executor (agent.daemon) does, with grpc.aio calls and asyncio tasks instead
of threads, timing each call; its tuning is made up (`Client.tune` in bench/_fake_agent.py).
It asks for no work before the process says go, and it has no RPC server.
"""

from __future__ import annotations

import asyncio
import time
from functools import singledispatchmethod
from typing import TYPE_CHECKING

import grpc

from agent.coordinator_calls import (
    call_failed,
    heartbeat_answered,
    heartbeat_request,
    lease_shard_request,
    lease_validation_request,
    registered,
    shard_answer,
    validation_answer,
)
from agent.state import AgentState
from agent.state.events import AgentStarted, HeartbeatTick, RPCServerStarted, ShardCompleted, WaitOver
from agent.state.instructions import (
    CancelShard,
    CompleteShard,
    LeaseShard,
    LeaseValidation,
    Register,
    ScheduleHeartbeat,
    SendHeartbeat,
    Shutdown,
    StartRPCServer,
    StartShard,
    Wait,
)
from foundation.wire import farm_pb2

if TYPE_CHECKING:
    from _fake_agent import Client

# Deadlines of the fake agents' calls: long, so that a slow coordinator shows as latency.
CALL_TIMEOUT_S = 60.0
REGISTER_TIMEOUT_S = 120.0


class FakeAgent:
    """One agent: the real state machine, its instructions carried out with grpc.aio calls,
    asyncio tasks and made-up tuning (`Client.tune`)."""

    def __init__(self, client: Client, n: int, stub, busy: bool):
        plan = client.plan
        self.client = client
        self.stub = stub
        self.busy = busy
        self.fingerprint = plan.busy_fingerprint if busy else plan.idle_fingerprint
        self.hostname = f"fake-{plan.index}-{n}"
        self.state = AgentState(lease_wait=plan.long_poll, skip_redundant_heartbeats=plan.skip_beats)
        self.registered = asyncio.Event()
        self.granted = False  # a shard was leased to it
        self._events: asyncio.Queue = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._cancelled: dict[str, asyncio.Event] = {}
        self._first_beat = self._first_ask = True

    @property
    def agent_id(self) -> str:
        return self.state.agent_id

    def start(self) -> None:
        self.post(AgentStarted())
        self._spawn(self._run())

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def post(self, event) -> None:
        self._events.put_nowait(event)

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self) -> None:

        while True:
            for instruction in self.state.handle(await self._events.get()):
                if isinstance(instruction, Shutdown):
                    return
                self._carry_out(instruction)

    async def _call(self, kind: str, name: str, call, answered, error_kind: str | None = None):
        """Make a call; time it under ``kind``; post the event its answer or failure is."""
        begin = time.monotonic()
        try:
            reply = await call()
        except grpc.aio.AioRpcError as err:
            self.client.calls.add(error_kind or kind, begin, time.monotonic() - begin, ok=False)
            self.client.counters["errors"] += 1
            self.post(call_failed(name, err))
            return None
        self.client.calls.add(kind if isinstance(kind, str) else kind(reply), begin, time.monotonic() - begin)
        self.post(answered(reply))
        return reply

    # ------------------------------------------------------------------ instructions

    @singledispatchmethod
    def _carry_out(self, instruction) -> None:
        raise TypeError(f"no way to carry out {instruction!r}")

    @_carry_out.register(Register)
    def _(self, instruction: Register) -> None:
        fp = self.fingerprint
        request = farm_pb2.RegisterRequest(
            fingerprint_id=fp["id"], fingerprint_summary=fp["summary"], fingerprint_json=fp["json"],
            target_kinds=["llvm"], hostname=self.hostname, tvm_version=self.client.plan.tvm_version,
            previous_agent_id=instruction.previous_agent_id)

        async def register():
            await asyncio.sleep(instruction.after)
            async with self.client.registering:
                if await self._call("register", "Register", lambda: self.stub.Register(
                        request, timeout=REGISTER_TIMEOUT_S), registered) is not None:
                    self.registered.set()

        self._spawn(register())

    @_carry_out.register(StartRPCServer)
    def _(self, instruction: StartRPCServer) -> None:
        self.post(RPCServerStarted())  # no RPC server: heartbeats say it does not serve

    @_carry_out.register(ScheduleHeartbeat)
    def _(self, instruction: ScheduleHeartbeat) -> None:
        # Agents started at different moments: their first beats spread over one interval.
        seconds = self.client.rng.uniform(0, instruction.seconds) if self._first_beat else instruction.seconds
        self._first_beat = False

        async def tick():
            await asyncio.sleep(seconds)
            self.post(HeartbeatTick(time.monotonic(), False))

        self._spawn(tick())

    @_carry_out.register(SendHeartbeat)
    def _(self, instruction: SendHeartbeat) -> None:
        def answered(reply):
            for item in reply.instructions:
                kind = item.WhichOneof("instruction")
                self.client.counters[kind] = self.client.counters.get(kind, 0) + 1
            return heartbeat_answered(reply)

        self._spawn(self._call("heartbeat", "Heartbeat", lambda: self.stub.Heartbeat(
            heartbeat_request(instruction), timeout=CALL_TIMEOUT_S), answered))

    @_carry_out.register(LeaseValidation)
    def _(self, instruction: LeaseValidation) -> None:
        request = lease_validation_request(instruction, self.fingerprint["id"], ["llvm"])

        async def ask():
            await self.client.go.wait()
            if self._first_ask and not self.busy:
                # Idle agents became idle at different moments too: spread over one poll, as a
                # fleet's are in a steady state (the coordinator ends held polls early by a random share).
                await asyncio.sleep(self.client.rng.uniform(0, max(1.0, self.client.plan.long_poll)))
            self._first_ask = False
            # None leased: no job gets that far.
            await self._call("lease_validation", "LeaseValidation", lambda: self.stub.LeaseValidation(
                request, timeout=CALL_TIMEOUT_S), validation_answer, error_kind="lease_error")

        self._spawn(ask())

    @_carry_out.register(LeaseShard)
    def _(self, instruction: LeaseShard) -> None:
        request = lease_shard_request(instruction, self.fingerprint["id"], ["llvm"])
        held = instruction.max_wait > 0

        def kind(reply):
            return "lease_granted" if reply.HasField("shard") else ("lease_held" if held else "lease_empty")

        self._spawn(self._call(kind, "LeaseShard", lambda: self.stub.LeaseShard(
            request, timeout=instruction.max_wait + CALL_TIMEOUT_S), shard_answer, error_kind="lease_error"))

    @_carry_out.register(Wait)
    def _(self, instruction: Wait) -> None:
        async def wait():
            await asyncio.sleep(instruction.seconds)
            self.post(WaitOver())

        self._spawn(wait())

    @_carry_out.register(StartShard)
    def _(self, instruction: StartShard) -> None:
        first, self.granted = not self.granted, True
        if first:
            self.client.counters["granted"] += 1
        cancelled = self._cancelled[instruction.lease.shard_id] = asyncio.Event()
        self._spawn(self.client.tune(self, instruction.lease, instruction.shard, cancelled, first))

    @_carry_out.register(CancelShard)
    def _(self, instruction: CancelShard) -> None:
        cancelled = self._cancelled.pop(instruction.lease.shard_id, None)
        if cancelled is not None:
            cancelled.set()

    @_carry_out.register(CompleteShard)
    def _(self, instruction: CompleteShard) -> None:
        lease = instruction.lease
        request = farm_pb2.CompleteShardRequest(agent_id=self.agent_id, shard_id=lease.shard_id,
                                                attempt=lease.attempt)

        def answered(_reply):
            self.client.counters["completed"] += 1
            return ShardCompleted(lease)

        self._spawn(self._call("complete_shard", "CompleteShard", lambda: self.stub.CompleteShard(
            request, timeout=CALL_TIMEOUT_S), answered))
