"""The coordinator at scale, simulated: N fake agents (no TVM) against a real coordinator on PostgreSQL.

For each N, a fresh database and a fresh `farm coordinator` process; fake agents run in a few
client processes (bench/_fake_agent.py), asyncio, one gRPC connection per
--agents-per-connection agents (a real agent has its own). Most agents share one made-up CPU
fingerprint and tune inception_v3 jobs (62 tasks each, so one shard per agent up to 62 agents
per job; jobs are submitted until there is a shard for every tuning agent);
they lease once and then report batches of the size the coordinator gives with the lease and
each answer (coordinator.fleet.report_sizing; --fixed-batch: always --batch records, as before
2026-11-23 22:00). Paced (the default): together they
offer --records-per-s, each agent at its share of that rate with at most one report in flight.
--schedule pipelined (the default) is the real agent's loop
(foundation/meta_schedule/database/report_pipeline.py): measure
a batch (for the agent's share of the interval), hand it to the report in flight's successor,
and measure the next meanwhile; a finished batch waits only for the report before it to be
answered, so a coordinator slower than the agents' measuring slows them down, and records/s
shows it. --schedule measured: report and wait for the answer before measuring on, as the
agent did before 2026-11-23 19:30. --schedule fixed: reports fall due on a fixed
clock whatever the coordinator's speed; one still in flight when the next is due makes that one
late (counted), and agents that fell behind (after the lease burst) catch up at full speed.
Saturating (--records-per-s 0): as fast as the coordinator takes them, at most --inflight
reports in flight per client process. With the pipelined schedule, agents are part-way
through their first shard, as in a fleet in a steady state: each finishes it after a random
share of --shard-seconds (300; busy agents / 300 completions a second), completes it and
leases the next (extra jobs are submitted for them), so that LeaseShard calls granted a shard
are timed in the window (0: every agent keeps its first shard, as before 2026-11-24). A tenth
(--idle-fraction) register another fingerprint that has no jobs: they only heartbeat and ask
for work as the real agent's loop does, a LeaseValidation and then a LeaseShard that the
coordinator holds for up to --long-poll seconds (0: answered at once, asked again after the
coordinator's retry_after, 1 s, as agents did before long polls); they start spread over one
poll, and polls still held at the window's end are cancelled, not cut short together. Agents
heartbeat every --heartbeat-interval seconds, listing their lease, as the real agent does: a
beat that would list the same lease as the last one is skipped when a report was accepted
within the interval (the coordinator counts that as a sign of life), and a full beat goes every
6 intervals (--always-beat: every interval).

Measured in a steady window of --seconds after the initial lease burst: client-side latency
per call kind (p50/p99; leases granted before the window apart, as the burst), records stored
per second (from the replies, checked against a COUNT in the database), how evenly reports
are sent (per 200 ms), and the coordinator's CPU and RSS (psutil, sampled every second),
besides the CPU of PostgreSQL and of the client processes, which share the same cores.

    .venv/bin/python bench/coordinator_scale.py --agents 10,100,1000 --seconds 60 --warmup 30 \
        --records-per-s 5500 [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _fake_agent
from _box_speed import reference_loop_ms
from _scale_measures import (
    answers_beside_slow_heartbeats,
    cpu_delta,
    cpu_seconds,
    percentile,
    postgres_processes,
    report_waves,
)

from agent.state import LEASE_WAIT_S

REPO = Path(__file__).resolve().parents[1]
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
MODEL = "inception_v3"
FARM = Path(sys.executable).with_name("farm")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def admin(sql: str, url: str = ADMIN_URL):
    import psycopg

    with psycopg.connect(url.replace("postgresql://", "postgresql://", 1), autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchone() if cur.description else None


def fake_fingerprint(tag: str) -> dict:
    """A CPU fingerprint no real box has, so the bench's jobs and records are its own."""
    from foundation.hardware.fingerprint import fingerprint_from_details

    details = {"arch": "x86_64", "vendor": "AuthenticAMD", "model": f"bench fake CPU {tag}",
               "features": ["sse4_2", "avx", "avx2", "fma", "f16c"], "cores": 2, "llvm_mcpu": "znver3",
               "llvm_triple": "x86_64-unknown-linux-gnu", "l2_kib": 512, "l3_kib": 32768}
    fp = fingerprint_from_details("cpu", details)
    return {"id": fp.id, "summary": fp.summary, "json": json.dumps(fp.to_json())}


def wait_serving(address: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the coordinator exited with {proc.returncode}")
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise RuntimeError(f"the coordinator on {address} did not serve within {timeout} s")


def submit_jobs(address: str, fingerprint_id: str, shards_wanted: int) -> list[str]:
    """inception_v3 at batches 1, 2, ...: a distinct model each, so each is its own job, until
    the jobs have at least ``shards_wanted`` shards (one per tuning agent).

    One at a time, each planned before the next is sent: the coordinator loads a submitted
    model in the gRPC thread while its planner may reload an evicted one (ModelCache keeps 4),
    and two concurrent loads break TVM's process-wide BlockBuilder stack (AssertionError).
    """
    import grpc

    from foundation.wire import farm_pb2, farm_pb2_grpc

    ids = []
    with grpc.insecure_channel(address) as channel:
        client = farm_pb2_grpc.FarmClientStub(channel)
        deadline = time.monotonic() + 600
        shards = 0
        batch = 0
        while shards < shards_wanted:
            batch += 1
            # reuse off: every job shards all its tasks, whatever the fleet reported before.
            reply = client.Submit(farm_pb2.SubmitRequest(zoo_name=MODEL, batch=batch, target="llvm",
                                                         fingerprint_id=fingerprint_id, reuse="off"), timeout=300)
            for job_id in (j.job.id for j in reply.jobs):
                ids.append(job_id)
                while True:
                    job = client.GetJob(farm_pb2.GetJobRequest(job_id=job_id), timeout=30)
                    if job.state == farm_pb2.JOB_STATE_RUNNING:
                        shards += job.shards.pending + job.shards.leased
                        break
                    if (job.state in (farm_pb2.JOB_STATE_FAILED, farm_pb2.JOB_STATE_CANCELLED)
                            or time.monotonic() > deadline):
                        raise RuntimeError(f"job {job_id} is {farm_pb2.JobState.Name(job.state)}: {job.error}")
                    time.sleep(0.1)
    return ids


def spare_shards(busy: int, args) -> int:
    """Shards beyond one per tuning agent, for the agents that finish theirs during the run to
    lease (--shard-seconds): the completions expected, and a fifth more."""
    if args.shard_seconds <= 0 or args.schedule != "pipelined" or args.records_per_s <= 0:
        return 0
    run = 1.0 + args.warmup + args.seconds
    return math.ceil(1.2 * busy * min(1.0, run / args.shard_seconds)) + 1


def record_templates(registry: str, job_ids: list[str]) -> dict[str, str]:
    """One real TuningRecord JSON per workload (TVM, here in the parent), its split factor marked.

    Like tests/test_coordinator_service.py's fake agents: split the first loop of the first
    block. The coordinator checks a reported record's shape and that its trace does not start
    with post-processing; the fake agents swap the factor for a fresh number per record.
    """
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from coordinator.cluster_store import ClusterStore
    from foundation.hardware.targets import to_tvm_target
    from foundation.meta_schedule.database.registry_database import module_json
    from foundation.registry.reported_records import trace_json_is_valid
    from foundation.registry.store import RegistryStore

    store = RegistryStore(registry)
    try:
        cluster = ClusterStore(store)
        templates: dict[str, str] = {}
        for job_id in job_ids:
            target = to_tvm_target(json.loads(store.get_job(job_id).target))
            for task in cluster.plans.job_tasks(job_id):
                if task.workload_shash in templates:
                    continue
                mod = tvm.ir.load_json(module_json(task.mod_json))
                sch = tvm.s_tir.Schedule(mod)
                block = sch.get_child_blocks(sch.get_sblock("root"))[0]
                sch.split(sch.get_loops(block)[0], [None, int(_fake_agent.FACTOR_MARK)])
                record = TuningRecord(sch.trace, Workload(mod), [1e-5], target, ArgInfo.from_prim_func(mod["main"]))
                text = json.dumps(record.as_json())
                if text.count(_fake_agent.FACTOR_MARK) != 1 or not trace_json_is_valid(json.loads(text)[0]):
                    raise RuntimeError(f"cannot template a record of {task.name}")
                templates[task.workload_shash] = text
        return templates
    finally:
        store.dispose()


def run_scale(agents: int, args) -> dict:
    tag = secrets.token_hex(4)
    database = f"farm_bench_{tag}_n{agents}"
    registry = f"postgresql://postgres@127.0.0.1:5432/{database}"
    admin(f"CREATE DATABASE {database}")
    coordinator = None
    clients: list[tuple[multiprocessing.Process, object]] = []
    # Outside the temporary home, so that it can be read after a failure.
    log_path = Path(tempfile.mkstemp(prefix=f"farm-bench-coordinator-n{agents}-", suffix=".log")[1])
    try:
        with tempfile.TemporaryDirectory(prefix="farm-bench-") as home:
            port, tracker_port = free_port(), free_port()
            address = f"127.0.0.1:{port}"
            env = dict(os.environ, FARM_HOME=home)
            log = open(log_path, "w")
            coordinator = subprocess.Popen(
                [str(FARM), "coordinator", "--listen", address, "--registry", registry,
                 "--tracker-listen", f"127.0.0.1:{tracker_port}",
                 "--heartbeat-interval", str(args.heartbeat_interval),
                 "--lease-ttl", str(args.heartbeat_interval * 6), "--grace", "2",
                 "--no-ingest-process" if args.no_ingest_process else "--ingest-process",
                 "--records-per-report", str(args.batch),
                 *(["--report-rate", str(args.report_rate)] if args.report_rate else []),
                 *(["--report-jitter", str(args.report_jitter)] if args.report_jitter is not None else [])],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            wait_serving(address, coordinator)
            coordinator_proc = psutil.Process(coordinator.pid)
            # The ingest process (coordinator.fleet.ingest_process), counted apart; not the tracker.
            ingest_procs = [c for c in coordinator_proc.children() if "spawn_main" in " ".join(c.cmdline())]

            from foundation.hardware.versions import tvm_version

            idle = int(round(agents * args.idle_fraction))
            busy = agents - idle
            busy_fp, idle_fp = fake_fingerprint(f"{tag} busy"), fake_fingerprint(f"{tag} idle")
            context = multiprocessing.get_context("spawn")
            processes = min(args.clients, agents)
            for i in range(processes):
                plan = _fake_agent.ClientPlan(
                    address=address, index=i, busy=busy // processes + (i < busy % processes),
                    idle=idle // processes + (i < idle % processes), busy_fingerprint=busy_fp,
                    idle_fingerprint=idle_fp, tvm_version=tvm_version(),
                    heartbeat_interval=args.heartbeat_interval, batch=args.batch, inflight=args.inflight, seed=i,
                    report_interval=busy * args.batch / args.records_per_s if args.records_per_s > 0 else 0.0,
                    schedule=args.schedule, follow_sizes=not args.fixed_batch, long_poll=args.long_poll,
                    skip_beats=not args.always_beat,
                    agents_per_connection=args.agents_per_connection, shard_seconds=args.shard_seconds)
                ours, theirs = context.Pipe()
                proc = context.Process(target=_fake_agent.run, args=(plan, theirs), daemon=True)
                proc.start()
                clients.append((proc, ours))
            begin = time.monotonic()
            for _proc, pipe in clients:
                if not pipe.poll(600):
                    raise RuntimeError("a client process did not register its agents in 600 s")
                pipe.recv()
            register_seconds = time.monotonic() - begin

            reference_ms = reference_loop_ms()
            begin = time.monotonic()
            job_ids = submit_jobs(address, busy_fp["id"], busy + spare_shards(busy, args))
            plan_seconds = time.monotonic() - begin
            templates = record_templates(registry, job_ids)

            go_at = time.monotonic() + 1.0
            window_start = go_at + args.warmup
            window_end = window_start + args.seconds
            for _proc, pipe in clients:
                pipe.send(("go", templates, go_at, window_start, window_end))

            client_procs = [psutil.Process(p.pid) for p, _ in clients]
            time.sleep(max(0.0, window_start - time.monotonic()))
            pg = postgres_processes()  # backends of the connections open now
            count_sql = "SELECT count(*) FROM tuning_records"
            count_start = admin(count_sql, registry)[0]
            cpu0 = (cpu_seconds([coordinator_proc]), cpu_seconds(pg), cpu_seconds(client_procs), time.monotonic(),
                    cpu_seconds(ingest_procs))
            samples = []
            spies = []
            if args.profile:
                # py-spy samples the thread holding the GIL through the window: where its Python time goes.
                for proc, name in [(coordinator_proc, "coordinator"), *((p, "ingest") for p in ingest_procs)]:
                    spies.append(subprocess.Popen(
                        [str(Path(sys.executable).with_name("py-spy")), "record", "-p", str(proc.pid),
                         "-d", str(int(args.seconds)), "-r", "50", "--nonblocking", "--gil", "--format", "raw",
                         "-o", str(Path(args.profile) / f"{name}_n{agents}.txt")],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            coordinator_proc.cpu_percent(None)
            while time.monotonic() < window_end:
                time.sleep(min(1.0, max(0.0, window_end - time.monotonic())))
                samples.append((coordinator_proc.cpu_percent(None), coordinator_proc.memory_info().rss,
                                coordinator_proc.num_threads(), sum(p.memory_info().rss for p in ingest_procs),
                                max(p.memory_info().rss for p in client_procs)))
            cpu1 = (cpu_seconds([coordinator_proc]), cpu_seconds(pg), cpu_seconds(client_procs), time.monotonic(),
                    cpu_seconds(ingest_procs))
            count_end = admin(count_sql, registry)[0]
            for spy in spies:
                spy.wait(timeout=60)

            results = []
            for proc, pipe in clients:
                if not pipe.poll(120):
                    raise RuntimeError("a client process did not finish within 120 s of the window's end")
                results.append(pipe.recv())
                proc.join(timeout=30)
            wall = cpu1[3] - cpu0[3]
    except BaseException:
        if coordinator is not None:
            tail = log_path.read_text(errors="replace")[-6000:]
            sys.stderr.write(f"--- the coordinator's log ({log_path}), last lines ---\n{tail}\n")
        raise
    finally:
        for proc, _pipe in clients:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        if coordinator is not None and coordinator.poll() is None:
            coordinator.send_signal(signal.SIGTERM)
            try:
                coordinator.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(coordinator.pid, signal.SIGKILL)
                coordinator.wait(timeout=10)
        admin(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")

    log_path.unlink(missing_ok=True)
    latency: dict[str, list[float]] = {}
    all_calls: dict[str, int] = {}
    failed: dict[str, int] = {}
    counters: dict[str, int] = {}
    burst_end = window_start  # when the last lease granted before the window was answered
    for _kind, calls, client_counters in results:
        for kind, items in calls.items():
            for start, seconds, ok in items:
                if kind == "register" or (kind == "lease_granted" and start < window_start):
                    # Registration and the lease burst (with the warm-up's leases) on their own.
                    if kind == "lease_granted":
                        burst_end = max(burst_end, start + seconds)
                    latency.setdefault("lease_burst" if kind == "lease_granted" else kind, []).append(seconds)
                elif window_start <= start < window_end:
                    latency.setdefault(kind, []).append(seconds)
                    all_calls[kind] = all_calls.get(kind, 0) + 1
                    if not ok:
                        failed[kind] = failed.get(kind, 0) + 1
        for key, value in client_counters.items():
            counters[key] = counters.get(key, 0) + value
    calls = {kind: {"count": len(values), "p50_ms": 1000 * percentile(values, 0.50),
                    "p99_ms": 1000 * percentile(values, 0.99), "max_ms": 1000 * max(values),
                    "per_s": all_calls.get(kind, 0) / args.seconds if kind in all_calls else None,
                    "failed": failed.get(kind, 0)}
             for kind, values in sorted(latency.items())}
    return {
        "agents": agents, "busy_agents": busy, "idle_agents": idle, "client_processes": processes,
        "jobs": len(job_ids), "register_s": register_seconds, "plan_s": plan_seconds,
        "reference_loop_ms": reference_ms,
        "window_s": wall, "calls": calls,
        # > 0: the lease burst went on into the window, whose figures then include it.
        "burst_into_window_s": burst_end - window_start,
        "records_per_s": counters["stored"] / args.seconds,
        "records_per_s_db": (count_end - count_start) / wall,
        "records_sent": counters["records_sent"], "records_stored": counters["stored"],
        "reports_answered": counters["reports_answered"],
        "duplicates": counters["duplicates"], "rejected_reports": counters["rejected_reports"],
        "errors": counters["errors"], "agents_with_shard": counters["granted"],
        "shards_completed": counters["completed"], "spare_shards": spare_shards(busy, args),
        "late_reports": counters["late_reports"],
        "answers_beside_heartbeats": answers_beside_slow_heartbeats(results, window_start, window_end),
        "report_waves": report_waves(results, window_start, window_end),
        "offered_records_per_s": args.records_per_s or None,
        "busy_agents_without_shard": counters["busy_without_shard"],
        "instructions": {k: counters.get(k, 0) for k in ("cancel_lease", "re_register")},
        "coordinator_cpu_pct_mean": 100 * cpu_delta(cpu0[0], cpu1[0]) / wall,
        "coordinator_cpu_pct_max": max(s[0] for s in samples),
        "coordinator_rss_mb_max": max(s[1] for s in samples) / 2**20,
        "coordinator_rss_mb_end": samples[-1][1] / 2**20,
        "coordinator_threads_max": max(s[2] for s in samples),
        "ingest_process": bool(ingest_procs),
        "ingest_cpu_pct_mean": 100 * cpu_delta(cpu0[4], cpu1[4]) / wall,
        "ingest_rss_mb_max": max(s[3] for s in samples) / 2**20,
        "postgres_cpu_pct_mean": 100 * cpu_delta(cpu0[1], cpu1[1]) / wall,
        "clients_cpu_pct_mean": 100 * cpu_delta(cpu0[2], cpu1[2]) / wall,
        "client_rss_mb_max": max(s[4] for s in samples) / 2**20,
    }


def print_table(r: dict, args) -> None:
    sizes = (f"{args.batch} records" if args.fixed_batch or args.schedule == "fixed" else
             f"at least {args.batch} records, as the coordinator sizes them")
    load = (f"paced ({args.schedule} schedule): {args.records_per_s:g} records/s offered, one report of "
            f"{sizes} in flight per agent"
            if args.records_per_s > 0 else
            f"saturating: {args.batch} records/report, <= {args.inflight} reports in flight per client process")
    print(f"\n== N = {r['agents']} agents ({r['busy_agents']} tuning, {r['idle_agents']} idle) in "
          f"{r['client_processes']} client process(es); {r['jobs']} {MODEL} jobs; heartbeat every "
          f"{args.heartbeat_interval:g} s; {load}; window {r['window_s']:.1f} s")
    print(f"   setup: registration {r['register_s']:.1f} s, submit+plan {r['plan_s']:.1f} s; "
          f"{r['agents_with_shard']} agents got a shard, {r['busy_agents_without_shard']} tuning agents none, "
          f"{r['shards_completed']} shards completed in the run ({r['spare_shards']} spare); "
          f"this box's speed: reference loop {r['reference_loop_ms']:.0f} ms (lower is faster)")
    print(f"   {'call':<14}{'count':>8}{'per s':>9}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}{'failed':>8}")
    for kind, c in r["calls"].items():
        rate = f"{c['per_s']:.1f}" if c["per_s"] is not None else "-"
        burst = (f"  (burst: went on {r['burst_into_window_s']:.1f} s into the window)"
                 if r["burst_into_window_s"] > 0 else "  (burst, before the window)")
        note = burst if kind == "lease_burst" else (
            "  (setup)" if kind == "register" else
            "  (a 10 ms timer's delay in the clients' own loops)" if kind == "client_loop_lag" else "")
        print(f"   {kind:<14}{c['count']:>8}{rate:>9}{c['p50_ms']:>10.1f}{c['p99_ms']:>10.1f}{c['max_ms']:>10.1f}"
              f"{c['failed']:>8}{note}")
    beside = r["answers_beside_heartbeats"]
    if beside:
        print(f"   report answers in the {1000 * beside['within_s']:.0f} ms before a heartbeat's answer: "
              f"{beside['slowest_1pct']:.1f} for the slowest 1% of heartbeats, {beside['all']:.1f} for all")
    waves = r["report_waves"]
    print(f"   reports sent per {1000 * waves['slot_s']:.0f} ms: {waves['mean']:.1f} mean, "
          f"{waves['max']} in the busiest "
          f"slot, none in {100 * waves['empty_share']:.0f}% of slots (agents in step send in waves)")
    if r["reports_answered"]:
        print(f"   records per report: {r['records_sent'] / r['reports_answered']:.1f} mean (of the reports answered "
              f"in the window)")
    print(f"   records: {r['records_per_s']:.0f}/s stored per the replies, {r['records_per_s_db']:.0f}/s per "
          f"COUNT(*) in the database; sent {r['records_sent']}, stored {r['records_stored']}, duplicates "
          f"{r['duplicates']}, rejected reports {r['rejected_reports']}, late reports {r['late_reports']}, "
          f"call errors {r['errors']}, "
          f"instructions {r['instructions']}")
    ingest = (f", its ingest process {r['ingest_cpu_pct_mean']:.0f}% (RSS {r['ingest_rss_mb_max']:.0f} MB max)"
              if r["ingest_process"] else " (reports ingested in it: --no-ingest-process)")
    print(f"   CPU (100% = one core of 2): coordinator {r['coordinator_cpu_pct_mean']:.0f}% mean "
          f"({r['coordinator_cpu_pct_max']:.0f}% max 1 s sample){ingest}, "
          f"PostgreSQL {r['postgres_cpu_pct_mean']:.0f}%, "
          f"fake-agent clients {r['clients_cpu_pct_mean']:.0f}% (RSS {r['client_rss_mb_max']:.0f} MB max each, "
          f"no garbage collection in the run); coordinator RSS {r['coordinator_rss_mb_max']:.0f} MB "
          f"max, {r['coordinator_threads_max']} threads")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="10,100,1000", help="comma-separated agent counts")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window per N")
    parser.add_argument("--warmup", type=float, default=5.0,
                        help="seconds for the lease burst before the window (at N = 1000 it lasts ~15 s)")
    parser.add_argument("--heartbeat-interval", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=16,
                        help="records per ReportRecords until the coordinator says otherwise (the agent's default "
                             "minimum); with --fixed-batch, always")
    parser.add_argument("--fixed-batch", action="store_true",
                        help="agents ignore the report sizes the coordinator hands out "
                             "(coordinator.fleet.report_sizing), "
                             "as before 2026-11-23 22:30")
    parser.add_argument("--report-rate", type=float, default=None,
                        help="the coordinator's --report-rate (reports a second it sizes the fleet's reports to)")
    parser.add_argument("--report-jitter", type=float, default=None,
                        help="the coordinator's --report-jitter (how far each agent's report size strays from "
                             "the fleet's; 0: every agent is told the same size, as before 2026-11-24)")
    parser.add_argument("--records-per-s", type=float, default=6000.0,
                        help="records per second the tuning agents offer together (0: as fast as answered)")
    parser.add_argument("--schedule", choices=("pipelined", "measured", "fixed"), default="pipelined",
                        help="paced agents: measure the next batch while one report is in flight, as the "
                             "real agent (pipelined); measure, report and wait (measured); or report on a "
                             "fixed clock and catch up when behind (fixed)")
    parser.add_argument("--shard-seconds", type=float, default=300.0,
                        help="pipelined schedule: the mean seconds a shard takes, so that agents complete "
                             "theirs and lease the next during the run as a fleet in a steady state does "
                             "(busy agents / this, a second); 0: every agent keeps its first shard, as before "
                             "2026-11-24")
    parser.add_argument("--inflight", type=int, default=4,
                        help="with --records-per-s 0: ReportRecords in flight per client process")
    parser.add_argument("--clients", type=int, default=2, help="client processes running the fake agents")
    parser.add_argument("--agents-per-connection", type=int, default=1,
                        help="fake agents sharing one gRPC connection (real agents have one each)")
    parser.add_argument("--idle-fraction", type=float, default=0.1)
    parser.add_argument("--long-poll", type=float, default=LEASE_WAIT_S, metavar="SECONDS",
                        help="how long agents without a shard let LeaseShard be held (the agent's "
                             f"default, {LEASE_WAIT_S} s); 0: answered at once and asked again every "
                             "retry_after (1 s), as before long polls")
    parser.add_argument("--always-beat", action="store_true",
                        help="every agent heartbeats every interval (as before 2026-11-23 16:30); by default "
                             "agents skip beats that an accepted report made redundant, as the real agent does")
    parser.add_argument("--no-ingest-process", action="store_true",
                        help="ingest reports in the coordinator's serving process "
                             "(farm coordinator --no-ingest-process)")
    parser.add_argument("--profile", metavar="DIR",
                        help="also record the coordinator with py-spy (collapsed stacks in DIR)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for n in (int(x) for x in args.agents.split(",")):
        result = run_scale(n, args)
        results.append(result)
        if not args.json:
            print_table(result, args)
            sys.stdout.flush()
    if args.json:
        print(json.dumps({"settings": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
