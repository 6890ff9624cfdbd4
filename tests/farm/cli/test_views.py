"""What people read: tables, job descriptions, units and progress lines, without a Python repr in sight."""

from __future__ import annotations

import datetime as dt
import io

from rich.console import Console

from farm.cli.output import print_fields, print_table
from farm.cli.progress import ConsoleProgress
from farm.cli.units import age
from farm.cli.views import JOB_COLUMNS, agent_row, job_fields, job_row
from farm.client import agent_json, job_json
from foundation.meta_schedule.progress import TaskProgress, estimated_latency
from foundation.units import duration, size
from foundation.wire import farm_pb2


def queued_bert_job() -> farm_pb2.Job:
    """What a coordinator answers for `farm submit bert cuda 15` with no CUDA agent yet."""
    job = farm_pb2.Job(id="job-0123456789", state=farm_pb2.JOB_STATE_QUEUED, target_kind="cuda",
                       status="waiting for an agent with target kind cuda (none registered); start `farm agent` "
                              "on such a box",
                       model=farm_pb2.ModelSummary(name="bert", source="zoo", batch=15))
    job.created_at.FromDatetime(dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=3))
    return job


def test_status_of_a_queued_job_has_no_python_values(capsys):
    print_fields(job_fields(job_json(queued_bert_job())))
    out = capsys.readouterr().out
    assert "None" not in out and "{" not in out and "pending" not in out
    lines = dict(line.split(":", 1) for line in out.splitlines())
    assert lines["Fingerprint"].strip().startswith("not chosen yet")
    assert lines["Shards"].strip() == "none yet" and lines["Trials"].strip() == "-"
    assert lines["Model"].strip() == "bert, batch 15" and lines["Created"].strip() == "3m ago"
    assert "Error" not in lines and "Artifact" not in lines


def test_status_shows_the_trial_plan_largest_share_first(capsys):
    job = queued_bert_job()
    job.state, job.trials_budget = farm_pb2.JOB_STATE_RUNNING, 64
    for task, trials, share, minor in (("reshape", 2, 0.0, True), ("fused_dense", 40, 0.7, False),
                                       ("fused_dense1", 22, 0.3, False)):
        job.trial_plan.append(farm_pb2.PlannedTrials(task=task, trials=trials, share=share, minor=minor))
    document = job_json(job)
    assert document["trial_plan"]["planned"] == 64 and document["trial_plan"]["budget"] == 64
    print_fields(job_fields(document))
    out = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("Plan:"))
    assert out[start].startswith("Plan:") and "64 of 64 trials over 3 tasks" in out[start]
    indent = out[start].index("64 of")
    assert out[start + 1][:indent].strip() == "" and out[start + 1].split() == ["fused_dense", "70.0%", "40", "trials"]
    assert out[start + 2].split() == ["fused_dense1", "30.0%", "22", "trials"]
    assert out[start + 3].strip() == "1 with nothing to tune: reshape 2"
    assert out[start + 4].startswith("Shards:")
    assert "trial_plan" not in job_json(queued_bert_job()) or job_json(queued_bert_job())["trial_plan"] is None


def test_job_table_aligns_columns(capsys):
    running = queued_bert_job()
    running.state, running.fingerprint_id, running.trials_done, running.trials_budget = (
        farm_pb2.JOB_STATE_RUNNING, "cuda-ab12cd34ef56", 120, 608)
    running.shards.leased, running.trial_errors = 2, 3
    print_table(JOB_COLUMNS, [job_row(job_json(queued_bert_job())), job_row(job_json(running))])
    header, queued, busy = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["JOB", "STATE", "MODEL"]
    for column in ("STATE", "TARGET", "TRIALS", "FINGERPRINT", "AGE"):
        start = header.index(column)
        assert queued[start] != " " and busy[start] != " " and queued[start - 1] == busy[start - 1] == " "
    assert "120/608 (3 failed)" in busy and "cuda-ab12cd34ef56" in busy
    assert queued.split()[6] == "-"  # no fingerprint yet: a dash, not None


def test_empty_table_says_so_on_stderr(capsys):
    print_table(JOB_COLUMNS, [], empty="no jobs at coord:50051")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "no jobs at coord:50051\n"


def test_agent_row():
    agent = farm_pb2.Agent(id="agent-1", fingerprint_id="cpu-1a2b3c4d5e6f", target_kinds=["llvm"], hostname="box1",
                           state=farm_pb2.AGENT_STATE_BUSY, rpc_server_serving=True, trials_per_second=1.234,
                           running_leases=[farm_pb2.LeaseRef(job_id="job-1", shard_id="job-1/shard-0", attempt=2)])
    agent.last_heartbeat.FromDatetime(dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=4))
    document = agent_json(agent)
    assert document["state"] == "busy" and document["rpc_server_serving"] is True
    assert agent_row(document) == ["agent-1", "busy", "cpu-1a2b3c4d5e6f", "cpu", "box1", "job-1/shard-0#2", "1.2",
                                   "serving", "4s ago"]
    idle = agent_json(farm_pb2.Agent(id="agent-2", target_kinds=["cuda"], state=farm_pb2.AGENT_STATE_IDLE))
    assert idle["rpc_server_serving"] is False and idle["trials_per_second"] == 0  # present, though proto-default
    assert agent_row(idle)[3] == "cuda" and agent_row(idle)[6] == "-"
    gpu = agent_json(farm_pb2.Agent(id="agent-3", target_kinds=["llvm", "cuda"], state=farm_pb2.AGENT_STATE_IDLE,
                                    fingerprint_summary="NVIDIA A100-SXM4-40GB, sm_80, 108 SMs, 40 GiB"))
    assert agent_row(gpu)[3] == "cuda: NVIDIA A100-SXM4-40GB"


def test_units():
    assert [duration(s) for s in (1.234e-5, 0.0042, 1.5, 125, 7300, None)] == [
        "12.3 us", "4.2 ms", "1.5 s", "2m05s", "2h01m", "-"]
    assert [size(n) for n in (512, 41_100, 2_300_000)] == ["512 B", "41.1 KB", "2.3 MB"]
    now = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
    assert [age(now - dt.timedelta(seconds=s), now) for s in (5, 300, 7200, 200_000)] == ["5s", "5m", "2h", "2d"]


def tasks() -> list[TaskProgress]:
    return [TaskProgress(index=i, name=f"task_{i}", weight=w, flop=1e6, budget=32, planned=8)
            for i, w in enumerate((1, 3))]


def measure(progress: ConsoleProgress, task: TaskProgress, seconds: list[float | None]) -> None:
    for sec in seconds:
        task.trials += 1
        if sec is None:
            task.run_errors += 1
        elif task.best_sec is None or sec < task.best_sec:
            task.best_sec = sec
        progress.measured(task, 1)
    progress.batch_measured(task)


def test_plain_progress_is_one_line_per_task_per_batch():
    out = io.StringIO()
    progress = ConsoleProgress(Console(file=out, force_terminal=False, width=200))
    first, second = tasks()
    progress.started([first, second])
    measure(progress, first, [2e-3, 1e-3, None, 3e-3])
    measure(progress, second, [5e-4] * 4)
    measure(progress, first, [9e-4] * 4)
    progress.finished([first, second])
    lines = out.getvalue().splitlines()
    assert len(lines) == 4, lines  # three batches and the total
    assert "task_0" in lines[0] and "4/8" in lines[0] and "best 1 ms" in lines[0] and "1 errors" in lines[0]
    assert "task_1" in lines[1] and "best 500 us" in lines[1]
    assert "task_0" in lines[2] and "8/8" in lines[2] and "best 900 us" in lines[2]
    assert estimated_latency([first, second]) == 9e-4 * 1 + 5e-4 * 3
    assert "12 trials over 2 tasks" in lines[3] and "model ~2.4 ms" in lines[3] and "trials/s" in lines[3]


def test_live_bars_count_to_each_task_planned_trials_and_total_them():
    out = io.StringIO()
    progress = ConsoleProgress(Console(file=out, force_terminal=True, width=200, color_system=None))
    first, second = tasks()
    progress.started([first, second])
    bars = progress._progress
    rows = {task.description: task for task in bars.tasks}
    assert set(rows) == {"task_0", "task_1", "total"}  # every row before the first frame
    assert rows["task_0"].total == 8 and rows["total"].total == 16
    measure(progress, first, [1e-3] * 10)  # the scheduler gave it more than planned
    assert rows["task_0"].completed == 10 and rows["task_0"].total == 10 and rows["total"].total == 18
    # The other task counted at the measured one's FLOP rate (1 MFLOP in 1 ms), 3 calls: 3 ms.
    assert "model ~4 ms (1/2 tasks estimated)" in rows["total"].fields["best"]
    measure(progress, second, [1e-3])
    assert "model ~4 ms" in rows["total"].fields["best"] and "estimated" not in rows["total"].fields["best"]
    progress.finished([first, second])
    assert progress._progress is None and "total" in out.getvalue()


def test_the_total_has_no_model_estimate_before_a_task_with_flops_is_measured():
    out = io.StringIO()
    progress = ConsoleProgress(Console(file=out, force_terminal=True, width=200, color_system=None))
    first, second = tasks()
    first.flop = 0.0  # a reshape: no rate to estimate the other task at
    progress.started([first, second])
    row = next(t for t in progress._progress.tasks if t.description == "total")
    assert "model - (0/2 tasks measured)" in row.fields["best"]
    measure(progress, first, [1e-3])
    assert "model - (1/2 tasks measured)" in row.fields["best"]
    progress.finished([first, second])


def test_a_job_tuned_in_rounds_says_how_they_ended_or_where_they_are():
    job = queued_bert_job()
    job.state = farm_pb2.JOB_STATE_RUNNING
    job.until.CopyFrom(farm_pb2.JobUntil(goal="onnxruntime", goal_ms=20.0, rounds=[farm_pb2.TunedRound(
        trials=8, median_ms=30.0, upper_quartile_ms=31.0, goal_ms=20.5, blocks=5, blocks_won=0, beats=False)]))
    doc = job_json(job)
    assert doc["until"]["rounds"][0]["timing"]["blocks_won"] == 0 and doc["until"]["stopped"] is None
    # Said from the rounds themselves (RoundsOutcome.summary), as the coordinator's own summary says it.
    assert dict(job_fields(doc))["Until"] == ("tuning in rounds until onnxruntime's 20.5 ms: after 1 round (8 trials) "
                                              "so far")
    job.state = farm_pb2.JOB_STATE_CANCELLED
    assert dict(job_fields(job_json(job)))["Until"] == ("cancelled while tuning in rounds until onnxruntime, "
                                                        "after 1 round judged")
    job.state = farm_pb2.JOB_STATE_SUCCEEDED
    job.until.stopped = "patience"
    job.until.rounds[0].blocks_won = -1  # a latency goal has no blocks to win
    doc = job_json(job)
    assert dict(job_fields(doc))["Until"] == (
        "not reached, no improvement: the tuned model ran in 30 ms here (upper quartile 31 ms), not beating "
        "onnxruntime's 20.5 ms, after 1 round (8 trials); the estimated latency did not improve by 1% for the last "
        "rounds")
    assert doc["until"]["stopped"] == "patience" and doc["until"]["rounds"][0]["timing"]["blocks_won"] is None
