"""Fake agents for bench/coordinator_scale.py: many FarmAgent clients in one process, no TVM.

Each fake agent (bench/_fake_agent_executor.py) is the real agent's state machine
(agent.state.AgentState) with fake I/O: it registers, heartbeats, asks for a validation and
then for a shard (a long poll), waits and backs off, completes shards and leases the next as
the real agent decides; only its tuning is made up here (records from templates, at a paced
rate: `Client.tune`). One process runs a share of the agents as asyncio tasks over grpc.aio
channels. It talks to its parent over a
multiprocessing pipe: it registers its agents and says so, waits for "go" (with one
TuningRecord JSON template per workload), then for a fixed time lets them work, and sends
back every call's start time and latency.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from dataclasses import dataclass, field

import grpc
from _fake_agent_executor import CALL_TIMEOUT_S, FakeAgent

from agent.state.events import Lease, ReportAccepted, ReportRefused, ShardStopped, ShardTuned
from foundation.wire import farm_pb2, farm_pb2_grpc

# The split factor in a template record; each report replaces it with a fresh number, so each
# record's trace (and digest) is new while its JSON keeps the shape the coordinator reads.
FACTOR_MARK = "7777777"


@dataclass
class ClientPlan:
    """What one client process does; plain values, so it crosses the process boundary."""

    address: str
    index: int
    busy: int  # agents that lease shards of the busy fingerprint and report records
    idle: int  # agents of a fingerprint without jobs: they only heartbeat and poll for leases
    busy_fingerprint: dict = field(default_factory=dict)  # id, summary, json
    idle_fingerprint: dict = field(default_factory=dict)
    tvm_version: str = ""
    heartbeat_interval: float = 5.0
    batch: int = 16
    inflight: int = 4  # ReportRecords in flight at once from this process (saturating mode)
    # Paced mode, when > 0: each tuning agent has one report in flight at a time, and
    # schedule "pipelined": measures a batch for this many seconds, hands it over to be reported
    # and measures the next meanwhile; a batch measured before the report ahead of it was
    # answered waits for that answer, as the real agent's (foundation/meta_schedule/database/report_pipeline.py); a
    # coordinator slower than the agents slows them, as it would a fleet.
    # schedule "measured": reports and waits for the answer before measuring on, as the agent
    # did before 2026-11-23 19:30 (it reported inside MetaSchedule's commit).
    # schedule "fixed": a report is due every this many seconds whatever the coordinator's
    # speed; one still in flight when the next is due makes that one late, and it is sent as
    # soon as the answer comes, so agents that fell behind catch up at full speed.
    report_interval: float = 0.0
    schedule: str = "pipelined"
    # Schedules "pipelined" and "measured": batch as the coordinator says with the lease and
    # each answer (records_per_report, report_within; coordinator.fleet.report_sizing), measuring at
    # plan.batch records per report_interval; False: always plan.batch records a report.
    follow_sizes: bool = True
    agents_per_connection: int = 1
    # Seconds an agent without a shard lets the coordinator hold its LeaseShard (max_wait, a
    # long poll), as the real agent does (agent.state.LEASE_WAIT_S); 0: answered at once, asked
    # again after retry_after, as agents did before long polls.
    long_poll: float = 20.0
    # Agents skip heartbeats that an accepted report in the last interval made redundant, as
    # the real agent does (agent.state.heartbeat_due); False: every agent beats every interval.
    skip_beats: bool = True
    # Schedule "pipelined": the mean seconds a shard takes to tune, > 0: each tuning agent is
    # part-way through its first shard, which ends after a random share of this (a fleet in a
    # steady state: N / shard_seconds completions a second); it then completes it and leases
    # the next, as the real agent does, and keeps that one (it would take this long too, longer
    # than a run). 0: agents keep their first shard to the end.
    shard_seconds: float = 0.0
    seed: int = 0


LAG_PROBE_S = 0.01


@dataclass
class Calls:
    """(start on the monotonic clock, latency in seconds, ok) per call kind."""

    items: dict = field(default_factory=dict)

    def add(self, kind: str, start: float, seconds: float, ok: bool = True) -> None:
        self.items.setdefault(kind, []).append((start, seconds, ok))


def run(plan: ClientPlan, pipe) -> None:
    """The process entry point."""
    asyncio.run(_main(plan, pipe))


async def _main(plan: ClientPlan, pipe) -> None:
    loop = asyncio.get_running_loop()
    # A connection per agent by default, as real agents each have theirs: one HTTP/2
    # connection carries at most 100 concurrent calls, so a few shared by hundreds of agents
    # queue their calls on the client side. (A local subchannel pool: channels to one address
    # would share a connection otherwise.)
    options = [("grpc.max_receive_message_length", 256 * 1024 * 1024), ("grpc.use_local_subchannel_pool", 1)]
    count = plan.busy + plan.idle
    channels = [grpc.aio.insecure_channel(plan.address, options=options)
                for _ in range(max(1, -(-count // plan.agents_per_connection)))]
    client = Client(plan)
    agents = [FakeAgent(client, n, farm_pb2_grpc.FarmAgentStub(channels[n % len(channels)]), n < plan.busy)
              for n in range(count)]
    try:
        # Every agent heartbeats from its registration on, listing its leases, as real ones do
        # (silent agents would be marked lost while the parent plans the jobs); none asks for
        # work before "go".
        for agent in agents:
            agent.start()
        await asyncio.gather(*(agent.registered.wait() for agent in agents))
        pipe.send(("registered", count))

        # The parent plans jobs, then says go: templates and the window on the monotonic clock.
        message = await loop.run_in_executor(None, pipe.recv)
        if message[0] != "go":
            return
        _, templates, client.go_at, client.window_start, client.window_end = message
        client.templates = {shash: text.split(FACTOR_MARK) for shash, text in templates.items()}
        # A full collection here stalled this process's loop for 70-230 ms, and every call
        # in flight looked that much slower: no collections from here to the end of the run,
        # which is short (the bench reports what the clients' memory grows to).
        gc.collect()
        gc.freeze()
        gc.disable()
        await asyncio.sleep(max(0.0, client.go_at - time.monotonic()))
        client.go.set()
        probe = asyncio.create_task(client.loop_lag_probe())
        # Calls still in flight at the window's end are cancelled, not waited for: held polls
        # would otherwise all come back in the same second, a burst no fleet makes.
        await asyncio.sleep(max(0.0, client.window_end - time.monotonic()))
        await asyncio.gather(*(agent.stop() for agent in agents), probe)
        client.counters["busy_without_shard"] = sum(1 for agent in agents if agent.busy and not agent.granted)
    finally:
        await asyncio.gather(*(channel.close() for channel in channels))
    pipe.send(("done", client.calls.items, client.counters))


class Client:
    """What one process's agents share (the plan, the window, call times and counters, record
    templates) and their made-up tuning."""

    def __init__(self, plan: ClientPlan):
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.calls = Calls()
        self.counters = {"stored": 0, "duplicates": 0, "records_sent": 0, "rejected_reports": 0, "errors": 0,
                         "re_register": 0, "cancel_lease": 0, "granted": 0, "busy_without_shard": 0,
                         "late_reports": 0, "reports_answered": 0, "completed": 0}
        self.registering = asyncio.Semaphore(32)
        self.reporting = asyncio.Semaphore(plan.inflight)
        # "go", and the window on the monotonic clock, come from the parent; until then no
        # agent asks for work.
        self.go = asyncio.Event()
        self.go_at = self.window_start = self.window_end = float("inf")
        self.templates: dict[str, list[str]] = {}
        self._serial = iter(range(plan.index * 10**8 + 2, (plan.index + 1) * 10**8))
        # Records per report and the longest a record waits, per agent, as the coordinator said.
        self._size_of: dict[str, tuple[int, float]] = {}

    def fresh(self, shash: str) -> str:
        head, tail = self.templates[shash]
        return f"{head}{next(self._serial)}{tail}"

    def next_batch(self, agent_id: str) -> tuple[int, float]:
        """(records, seconds to measure them) of the agent's next batch, at its share of the rate."""
        plan = self.plan
        if not (plan.follow_sizes and plan.report_interval > 0) or agent_id not in self._size_of:
            return plan.batch, plan.report_interval
        per_s = plan.batch / plan.report_interval
        records, within = self._size_of[agent_id]
        n = max(1, min(records, int(per_s * within)))
        return n, n / per_s

    def follow(self, agent_id: str, records: int, within) -> None:
        if records > 0:
            self._size_of[agent_id] = (records, within.ToTimedelta().total_seconds() or self.plan.report_interval)

    async def loop_lag_probe(self) -> None:
        # How late this process's own event loop runs a timer: the share of every latency
        # above that the clients, not the coordinator, add.
        while time.monotonic() < self.window_end:
            begin = time.monotonic()
            await asyncio.sleep(LAG_PROBE_S)
            self.calls.add("client_loop_lag", begin, max(0.0, time.monotonic() - begin - LAG_PROBE_S))

    # ------------------------------------------------------------------ made-up tuning

    async def tune(self, agent: FakeAgent, lease: Lease, shard, cancelled: asyncio.Event, first: bool) -> None:
        """Report fresh records of ``shard`` as the plan paces them, until it is tuned (ShardTuned),
        its lease is over (a refused report, or cancelled: ShardStopped), or the window ends."""
        plan = self.plan
        self.follow(agent.agent_id, shard.records_per_report, shard.report_within)
        work = _ShardWork(agent, lease, shard, [t for t in shard.tasks if t.workload_shash in self.templates],
                          cancelled)
        paced = plan.report_interval > 0
        next_at = time.monotonic() + (self.rng.uniform(0, plan.report_interval) if paced else 0.0)
        if paced and plan.schedule == "pipelined":
            # Part-way through its first shard (ClientPlan.shard_seconds); the next outlasts the run.
            done_at = (self.go_at + self.rng.uniform(0, plan.shard_seconds)
                       if first and plan.shard_seconds > 0 else float("inf"))
            ended = await self.pipelined_reports(work, next_at, done_at)
        else:
            ended = await self.steady_reports(work, next_at)
        if ended == "tuned":
            agent.post(ShardTuned(lease))
        elif ended == "stopped":
            agent.post(ShardStopped(lease))

    async def report_once(self, work: _ShardWork, n: int | None = None) -> bool | None:
        """One ReportRecords of ``n`` (default plan.batch) fresh records; None when the call failed."""
        shard, agent = work.shard, work.agent
        records = []
        for i in range(self.plan.batch if n is None else n):
            task = work.tasks[(work.turn + i) % len(work.tasks)]
            work.trials[task.name] += 1
            records.append(farm_pb2.MeasuredRecord(task_name=task.name, workload_shash=task.workload_shash,
                                                   tuning_record_json=self.fresh(task.workload_shash)))
        work.turn += len(records)
        # As the real agent: the progress of every task of the shard with each report.
        progress = [farm_pb2.TaskProgress(shard_id=shard.shard_id, task_name=t.name, trials=work.trials[t.name],
                                          budget=shard.budget.max_trials_per_task, best_us=10.0)
                    for t in work.tasks]
        request = farm_pb2.ReportRecordsRequest(agent_id=agent.agent_id, shard_id=shard.shard_id,
                                                attempt=shard.attempt, records=records, progress=progress)
        begin = time.monotonic()
        try:
            reply = await agent.stub.ReportRecords(request, timeout=CALL_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            self.calls.add("report", begin, time.monotonic() - begin, ok=False)
            self.counters["errors"] += 1
            return None
        end = time.monotonic()
        self.calls.add("report", begin, end - begin, ok=reply.accepted)
        if reply.accepted:
            self.follow(agent.agent_id, reply.records_per_report, reply.report_within)
            agent.post(ReportAccepted(end))
        else:
            agent.post(ReportRefused(work.lease, reply.reason))
        # Answered in the window (sent maybe before it, as in any steady state): with
        # seconds of latency, counting only reports sent and answered within the window
        # undercounted what was stored in it.
        if self.window_start <= end <= self.window_end:
            self.counters["records_sent"] += len(records)
            self.counters["reports_answered"] += 1
            self.counters["stored"] += reply.stored
            self.counters["duplicates"] += reply.duplicates
            if not reply.accepted:
                self.counters["rejected_reports"] += 1
        return reply.accepted

    async def pipelined_reports(self, work: _ShardWork, measured_at: float, done_at: float) -> str:
        """The real agent's loop: a batch measured by ``measured_at`` is reported while the next is
        measured. "tuned" once the shard is (at ``done_at``, its last report answered); "stopped"
        when the lease is over; "window" at the window's end."""
        plan, agent_id = self.plan, work.agent.agent_id
        in_flight = None
        n, measuring = self.next_batch(agent_id)
        began = measured_at - measuring  # when the batch being measured began
        while work.tasks:
            if work.cancelled.is_set():
                return "stopped"
            if measured_at >= done_at:
                # Tuned part-way through a batch: the rest is reported once the report ahead
                # is answered (the real agent's flush), then the shard is complete.
                await asyncio.sleep(max(0.0, done_at - time.monotonic()))
                if in_flight is not None and await in_flight is False:
                    return "stopped"
                rest = int((done_at - began) * plan.batch / plan.report_interval)
                if rest > 0 and await self.report_once(work, rest) is False:
                    return "stopped"
                return "tuned" if time.monotonic() < self.window_end else "window"
            await asyncio.sleep(max(0.0, measured_at - time.monotonic()))
            # As the real agent (foundation.meta_schedule.database.shard_database): a size that grew
            # while this batch was measured applies to it.
            grown, seconds = self.next_batch(agent_id)
            if grown > n and time.monotonic() < self.window_end:
                measured_at += seconds / grown * (grown - n)
                n = grown
                continue
            if in_flight is not None:
                waited_from = time.monotonic()
                accepted = await in_flight  # the batch is handed over once the one ahead is answered
                in_flight = None
                if (time.monotonic() - waited_from > max(0.05, plan.report_interval / 4)
                        and self.window_start <= waited_from < self.window_end):
                    self.counters["late_reports"] += 1  # measured before the report ahead was answered
                if accepted is False:
                    return "stopped"  # the lease is over (lost to a missed TTL)
            if time.monotonic() >= self.window_end:
                return "window"
            in_flight = asyncio.ensure_future(self.report_once(work, n))
            n, measuring = self.next_batch(agent_id)  # as the last answer said
            began = time.monotonic()
            measured_at = began + measuring
        return "window"

    async def steady_reports(self, work: _ShardWork, next_at: float) -> str:
        """Schedules "measured" and "fixed", and saturating: report until the window ends
        ("window") or the lease is over ("stopped")."""
        plan = self.plan
        paced = plan.report_interval > 0
        while work.tasks and time.monotonic() < self.window_end:
            if work.cancelled.is_set():
                return "stopped"
            if paced:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                if (time.monotonic() - next_at > max(0.05, plan.report_interval / 4)
                        and self.window_start <= next_at < self.window_end):
                    self.counters["late_reports"] += 1  # the previous reply came after this one was due
                next_at += plan.report_interval
                if time.monotonic() >= self.window_end:
                    break
                n, measuring = (self.next_batch(work.agent.agent_id) if plan.schedule == "measured"
                                else (plan.batch, 0.0))
                accepted = await self.report_once(work, n)
                if plan.schedule == "measured":
                    next_at = time.monotonic() + measuring  # the next batch is measured now
            else:
                async with self.reporting:
                    if time.monotonic() >= self.window_end:
                        break
                    accepted = await self.report_once(work)
            if accepted is False:
                return "stopped"  # the lease is over (lost to a missed TTL)
        return "window"


@dataclass
class _ShardWork:
    """One leased shard being "tuned": the tasks it reports records of, and how far it got."""

    agent: FakeAgent
    lease: Lease
    shard: object
    tasks: list
    cancelled: asyncio.Event
    trials: dict = field(default_factory=dict)
    turn: int = 0

    def __post_init__(self):
        self.trials = {t.name: 0 for t in self.tasks}
