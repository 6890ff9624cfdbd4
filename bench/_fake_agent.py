"""Fake agents for bench/coordinator_scale.py: many FarmAgent clients in one process, no TVM.

One process runs a share of the agents as asyncio tasks over one grpc.aio channel. It talks to
its parent over a multiprocessing pipe: it registers its agents and says so, waits for "go"
(with one TuningRecord JSON template per workload), then for a fixed time heartbeats, leases
and reports records, and sends back every call's start time and latency.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from dataclasses import dataclass, field

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
    # long poll), as the real agent does (agent/daemon.py); 0: answered at once, asked again
    # after retry_after, as agents did before long polls.
    long_poll: float = 20.0
    # Agents skip heartbeats that an accepted report in the last interval made redundant, as
    # the real agent does (agent.daemon.heartbeat_due); False: every agent beats every interval.
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
    import grpc

    from agent.state import heartbeat_due
    from foundation.wire import farm_pb2, farm_pb2_grpc

    loop = asyncio.get_running_loop()
    rng = random.Random(plan.seed)
    calls = Calls()
    counters = {"stored": 0, "duplicates": 0, "records_sent": 0, "rejected_reports": 0, "errors": 0,
                "re_register": 0, "cancel_lease": 0, "granted": 0, "busy_without_shard": 0,
                "late_reports": 0, "reports_answered": 0, "completed": 0}
    # A connection per agent by default, as real agents each have theirs: one HTTP/2
    # connection carries at most 100 concurrent calls, so a few shared by hundreds of agents
    # queue their calls on the client side. (A local subchannel pool: channels to one address
    # would share a connection otherwise.)
    options = [("grpc.max_receive_message_length", 256 * 1024 * 1024), ("grpc.use_local_subchannel_pool", 1)]
    agents = plan.busy + plan.idle
    channels = [grpc.aio.insecure_channel(plan.address, options=options)
                for _ in range(max(1, -(-agents // plan.agents_per_connection)))]
    stubs = [farm_pb2_grpc.FarmAgentStub(channel) for channel in channels]
    stub_of: dict[str, object] = {}
    try:

        # ---------------------------------------------------------------- registration
        gate = asyncio.Semaphore(32)

        async def register(fingerprint: dict, n: int) -> str:
            async with gate:
                begin = time.monotonic()
                stub = stubs[n % len(stubs)]
                reply = await stub.Register(farm_pb2.RegisterRequest(
                    fingerprint_id=fingerprint["id"], fingerprint_summary=fingerprint["summary"],
                    fingerprint_json=fingerprint["json"], target_kinds=["llvm"],
                    hostname=f"fake-{plan.index}-{n}", tvm_version=plan.tvm_version), timeout=120)
                calls.add("register", begin, time.monotonic() - begin)
                stub_of[reply.agent_id] = stub
                return reply.agent_id

        # Every agent heartbeats from its registration on, listing its leases, as real ones do
        # (silent agents would be marked lost while the parent plans the jobs). The window,
        # on the monotonic clock, comes with "go"; until then it is open-ended.
        window = [float("inf"), float("inf")]
        leases_of: dict[str, list] = {}
        reported_at: dict[str, float] = {}  # monotonic: the agent's last accepted report

        async def heartbeat_loop(agent_id: str, running: list) -> None:
            # Agents started at different moments: spread the beats over one interval.
            await asyncio.sleep(rng.uniform(0, plan.heartbeat_interval))
            last_sent_at, last_said = float("-inf"), None
            while time.monotonic() < window[1]:
                begin = time.monotonic()
                said = tuple((r.shard_id, r.attempt) for r in running)
                if plan.skip_beats and not heartbeat_due(begin, last_sent_at, said == last_said,
                                                         reported_at.get(agent_id, float("-inf")),
                                                         plan.heartbeat_interval):
                    await asyncio.sleep(plan.heartbeat_interval)
                    continue
                last_sent_at, last_said = begin, said
                try:
                    request = farm_pb2.HeartbeatRequest(agent_id=agent_id, running_leases=list(running))
                    request.sent_at.GetCurrentTime()  # as the real agent does (agent/daemon.py)
                    reply = await stub_of[agent_id].Heartbeat(request, timeout=60)
                    calls.add("heartbeat", begin, time.monotonic() - begin)
                    for item in reply.instructions:
                        kind = item.WhichOneof("instruction")
                        counters[kind] = counters.get(kind, 0) + 1
                except grpc.aio.AioRpcError:
                    calls.add("heartbeat", begin, time.monotonic() - begin, ok=False)
                    counters["errors"] += 1
                await asyncio.sleep(max(0.0, begin + plan.heartbeat_interval - time.monotonic()))

        busy_ids = await asyncio.gather(*(register(plan.busy_fingerprint, n) for n in range(plan.busy)))
        idle_ids = await asyncio.gather(*(register(plan.idle_fingerprint, plan.busy + n) for n in range(plan.idle)))
        beats = [asyncio.create_task(heartbeat_loop(a, leases_of.setdefault(a, []))) for a in busy_ids + idle_ids]
        pipe.send(("registered", len(busy_ids) + len(idle_ids)))

        # The parent plans jobs, then says go: templates and the window on the monotonic clock.
        message = await loop.run_in_executor(None, pipe.recv)
        if message[0] != "go":
            return
        _, templates, go_at, window_start, window_end = message
        window[:] = [window_start, window_end]
        templates = {shash: text.split(FACTOR_MARK) for shash, text in templates.items()}
        serial = iter(range(plan.index * 10**8 + 2, (plan.index + 1) * 10**8))
        reporting = asyncio.Semaphore(plan.inflight)
        # A full collection here stalled this process's loop for 70-230 ms, and every call
        # in flight looked that much slower: no collections from here to the end of the run,
        # which is short (the bench reports what the clients' memory grows to).
        gc.collect()
        gc.freeze()
        gc.disable()
        await asyncio.sleep(max(0.0, go_at - time.monotonic()))

        def fresh(shash: str) -> str:
            head, tail = templates[shash]
            return f"{head}{next(serial)}{tail}"

        # ---------------------------------------------------------------- one agent
        async def lease(agent_id: str, fingerprint_id: str):
            """As the real agent's work loop (agent/daemon.py): a LeaseValidation, then a
            LeaseShard, held up to plan.long_poll (never past the window). (shard or None, wait)."""
            begin = time.monotonic()
            try:
                await stub_of[agent_id].LeaseValidation(farm_pb2.LeaseValidationRequest(
                    agent_id=agent_id, fingerprint_id=fingerprint_id, target_kinds=["llvm"]), timeout=60)
                calls.add("lease_validation", begin, time.monotonic() - begin)  # none: no job gets that far
                request = farm_pb2.LeaseShardRequest(agent_id=agent_id, fingerprint_id=fingerprint_id,
                                                     target_kinds=["llvm"])
                # Not cut short at the window's end: every idle agent would come back from its
                # poll in the same second, a burst no fleet makes; polls still held then are
                # cancelled (idle_agents).
                hold = plan.long_poll
                if hold > 0:
                    request.max_wait.FromNanoseconds(int(hold * 1e9))
                begin = time.monotonic()
                reply = await stub_of[agent_id].LeaseShard(request, timeout=hold + 60)
            except grpc.aio.AioRpcError:
                calls.add("lease_error", begin, time.monotonic() - begin, ok=False)
                counters["errors"] += 1
                return None, 1.0
            granted = reply.HasField("shard")
            kind = "lease_granted" if granted else ("lease_held" if hold > 0 else "lease_empty")
            calls.add(kind, begin, time.monotonic() - begin)
            wait = reply.retry_after.ToTimedelta().total_seconds() if reply.HasField("retry_after") else 1.0
            return (reply.shard if granted else None), wait

        # Records per report and the longest a record waits, per agent, as the coordinator said.
        size_of: dict[str, tuple[int, float]] = {}

        def next_batch(agent_id: str) -> tuple[int, float]:
            """(records, seconds to measure them) of the agent's next batch, at its share of the rate."""
            if not (plan.follow_sizes and plan.report_interval > 0) or agent_id not in size_of:
                return plan.batch, plan.report_interval
            per_s = plan.batch / plan.report_interval
            records, within = size_of[agent_id]
            n = max(1, min(records, int(per_s * within)))
            return n, n / per_s

        def follow(agent_id: str, records: int, within) -> None:
            if records > 0:
                size_of[agent_id] = (records, within.ToTimedelta().total_seconds() or plan.report_interval)

        async def report_once(agent_id: str, shard, tasks: list, trials: dict, turn: int,
                              n: int | None = None) -> bool | None:
            """One ReportRecords of ``n`` (default plan.batch) fresh records; None when the call failed."""
            records = []
            for i in range(plan.batch if n is None else n):
                task = tasks[(turn + i) % len(tasks)]
                trials[task.name] += 1
                records.append(farm_pb2.MeasuredRecord(task_name=task.name, workload_shash=task.workload_shash,
                                                       tuning_record_json=fresh(task.workload_shash)))
            # As the real agent: the progress of every task of the shard with each report.
            progress = [farm_pb2.TaskProgress(shard_id=shard.shard_id, task_name=t.name, trials=trials[t.name],
                                              budget=shard.budget.max_trials_per_task, best_us=10.0)
                        for t in tasks]
            request = farm_pb2.ReportRecordsRequest(agent_id=agent_id, shard_id=shard.shard_id,
                                                    attempt=shard.attempt, records=records, progress=progress)
            begin = time.monotonic()
            try:
                reply = await stub_of[agent_id].ReportRecords(request, timeout=60)
            except grpc.aio.AioRpcError:
                calls.add("report", begin, time.monotonic() - begin, ok=False)
                counters["errors"] += 1
                return None
            end = time.monotonic()
            calls.add("report", begin, end - begin, ok=reply.accepted)
            if reply.accepted:
                reported_at[agent_id] = end
                follow(agent_id, reply.records_per_report, reply.report_within)
            # Answered in the window (sent maybe before it, as in any steady state): with
            # seconds of latency, counting only reports sent and answered within the window
            # undercounted what was stored in it.
            if window_start <= end <= window_end:
                counters["records_sent"] += len(records)
                counters["reports_answered"] += 1
                counters["stored"] += reply.stored
                counters["duplicates"] += reply.duplicates
                if not reply.accepted:
                    counters["rejected_reports"] += 1
            return reply.accepted

        async def leased_shard(agent_id: str):
            shard = None
            while shard is None and time.monotonic() < window_end:
                shard, wait = await lease(agent_id, plan.busy_fingerprint["id"])
                if shard is None:
                    await asyncio.sleep(min(max(wait, 0.0), 5.0))
            return shard

        async def busy_agent(agent_id: str) -> None:
            running = leases_of[agent_id]
            shard = await leased_shard(agent_id)
            if shard is None:
                counters["busy_without_shard"] += 1
                return
            counters["granted"] += 1
            paced = plan.report_interval > 0
            # Part-way through its first shard (ClientPlan.shard_seconds); the next outlasts the run.
            done_at = (go_at + rng.uniform(0, plan.shard_seconds)
                       if paced and plan.schedule == "pipelined" and plan.shard_seconds > 0 else float("inf"))
            while True:
                follow(agent_id, shard.records_per_report, shard.report_within)
                running[:] = [farm_pb2.LeaseRef(job_id=shard.job_id, shard_id=shard.shard_id,
                                                attempt=shard.attempt)]
                tasks = [t for t in shard.tasks if t.workload_shash in templates]
                trials = {t.name: 0 for t in tasks}
                next_at = time.monotonic() + (rng.uniform(0, plan.report_interval) if paced else 0.0)
                if not (paced and plan.schedule == "pipelined"):
                    break
                if not await pipelined_reports(agent_id, shard, tasks, trials, next_at, done_at):
                    return
                # Tuned: complete the shard and lease the next, as the real agent's loop does.
                running.clear()
                begin = time.monotonic()
                try:
                    await stub_of[agent_id].CompleteShard(farm_pb2.CompleteShardRequest(
                        agent_id=agent_id, shard_id=shard.shard_id, attempt=shard.attempt), timeout=60)
                    calls.add("complete_shard", begin, time.monotonic() - begin)
                except grpc.aio.AioRpcError:
                    calls.add("complete_shard", begin, time.monotonic() - begin, ok=False)
                    counters["errors"] += 1
                counters["completed"] += 1
                done_at = float("inf")
                shard = await leased_shard(agent_id)
                if shard is None:
                    return
            turn = 0
            while tasks and time.monotonic() < window_end:
                if paced:
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                    if (time.monotonic() - next_at > max(0.05, plan.report_interval / 4)
                            and window_start <= next_at < window_end):
                        counters["late_reports"] += 1  # the previous reply came after this one was due
                    next_at += plan.report_interval
                    if time.monotonic() >= window_end:
                        break
                    n, measuring = next_batch(agent_id) if plan.schedule == "measured" else (plan.batch, 0.0)
                    accepted = await report_once(agent_id, shard, tasks, trials, turn, n)
                    if plan.schedule == "measured":
                        next_at = time.monotonic() + measuring  # the next batch is measured now
                else:
                    async with reporting:
                        if time.monotonic() >= window_end:
                            break
                        n = plan.batch
                        accepted = await report_once(agent_id, shard, tasks, trials, turn, n)
                turn += n
                if accepted is False:
                    break  # the lease is over (lost to a missed TTL); this agent stops

        async def pipelined_reports(agent_id: str, shard, tasks: list, trials: dict, measured_at: float,
                                    done_at: float) -> bool:
            """The real agent's loop: a batch measured by ``measured_at`` is reported while the next is
            measured. True once the shard is tuned (at ``done_at``, its last report answered);
            False at the window's end or when the lease is over."""
            in_flight = None
            turn = 0
            n, measuring = next_batch(agent_id)
            began = measured_at - measuring  # when the batch being measured began
            while tasks:
                if measured_at >= done_at:
                    # Tuned part-way through a batch: the rest is reported once the report ahead
                    # is answered (the real agent's flush), then the shard is complete.
                    await asyncio.sleep(max(0.0, done_at - time.monotonic()))
                    if in_flight is not None and await in_flight is False:
                        return False
                    rest = int((done_at - began) * plan.batch / plan.report_interval)
                    if rest > 0 and await report_once(agent_id, shard, tasks, trials, turn, rest) is False:
                        return False
                    return time.monotonic() < window_end
                await asyncio.sleep(max(0.0, measured_at - time.monotonic()))
                # As the real agent (foundation.meta_schedule.database.shard_database): a size that grew
                # while this batch was measured applies to it.
                grown, seconds = next_batch(agent_id)
                if grown > n and time.monotonic() < window_end:
                    measured_at += seconds / grown * (grown - n)
                    n = grown
                    continue
                if in_flight is not None:
                    waited_from = time.monotonic()
                    accepted = await in_flight  # the batch is handed over once the one ahead is answered
                    in_flight = None
                    if (time.monotonic() - waited_from > max(0.05, plan.report_interval / 4)
                            and window_start <= waited_from < window_end):
                        counters["late_reports"] += 1  # measured before the report ahead was answered
                    if accepted is False:
                        return False  # the lease is over (lost to a missed TTL); this agent stops
                if time.monotonic() >= window_end:
                    return False
                in_flight = asyncio.ensure_future(report_once(agent_id, shard, tasks, trials, turn, n))
                turn += n
                n, measuring = next_batch(agent_id)  # as the last answer said
                began = time.monotonic()
                measured_at = began + measuring

        async def idle_agent(agent_id: str) -> None:
            # Idle agents became idle at different moments too: spread over one poll, as a fleet's
            # are in a steady state (the coordinator ends held polls early by a random share).
            await asyncio.sleep(rng.uniform(0, max(1.0, plan.long_poll)))
            while time.monotonic() < window_end:
                _shard, wait = await lease(agent_id, plan.idle_fingerprint["id"])
                await asyncio.sleep(min(max(wait, 0.0), 5.0))

        async def idle_agents() -> None:
            tasks = [asyncio.create_task(idle_agent(a)) for a in idle_ids]
            await asyncio.sleep(max(0.0, window_end - time.monotonic()))
            for task in tasks:  # polls held past the window's end are not waited for
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        async def loop_lag_probe() -> None:
            # How late this process's own event loop runs a timer: the share of every latency
            # above that the clients, not the coordinator, add.
            while time.monotonic() < window_end:
                begin = time.monotonic()
                await asyncio.sleep(LAG_PROBE_S)
                calls.add("client_loop_lag", begin, max(0.0, time.monotonic() - begin - LAG_PROBE_S))

        await asyncio.gather(*(busy_agent(a) for a in busy_ids), idle_agents(), *beats, loop_lag_probe())
    finally:
        await asyncio.gather(*(channel.close() for channel in channels))
    pipe.send(("done", calls.items, counters))
