"""Real `farm coordinator` and `farm agent` processes told FARM_LOG_FORMAT=json write nothing but JSON lines,
no library chatter, and name the work each record is about."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess

import pytest

from foundation.logs import LIBRARIES

from support.polling import wait_for


@pytest.mark.slow  # a real coordinator and its tracker start: ~10-25 s
@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_coordinator_logs_json_lines(make_cluster, monkeypatch):
    monkeypatch.setenv("FARM_LOG_FORMAT", "json")
    monkeypatch.setenv("FARM_LOG_LEVEL", "debug")  # the farm's debug records, and still no library's INFO
    # Metrics beyond loopback on a farm without a token: a warning, which is a record too.
    cluster = make_cluster(coordinator_options=("--metrics-listen", "0.0.0.0:0"))
    cluster.start_coordinator()  # a fresh registry: alembic migrates it, chattily at INFO
    # Health says SERVING a moment before the start-up line is written.
    wait_for(lambda: "coordinator on " in cluster.log("coordinator"), 60, "the coordinator's start-up record")
    cluster.stop_coordinator()
    lines = [line for line in cluster.log("coordinator").splitlines() if line.strip()]
    assert lines, "the coordinator logged nothing"
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
    assert any(r["logger"] == "farm.coordinator" and r["message"].startswith("coordinator on ") for r in records)
    assert any(r["level"] == "warning" and "metrics listens on 0.0.0.0:0, beyond loopback" in r["message"]
               for r in records), records
    chatter = [r for r in records if not r["logger"].startswith("farm") and r["level"] in ("debug", "info")]
    assert not chatter, chatter


@pytest.mark.slow  # a real coordinator and its tracker start: ~10-25 s
@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_coordinator_text_lines_share_one_layout(make_cluster, monkeypatch):
    """In text, every line the coordinator writes is a record in the one layout, its start-up line
    and its open-port warning too; no library's INFO (alembic migrates the fresh registry)."""
    monkeypatch.setenv("FARM_LOG_FORMAT", "text")
    cluster = make_cluster(coordinator_options=("--metrics-listen", "0.0.0.0:0"))
    cluster.start_coordinator()
    wait_for(lambda: "coordinator on " in cluster.log("coordinator"), 60, "the coordinator's start-up record")
    cluster.stop_coordinator()
    lines = [line for line in cluster.log("coordinator").splitlines() if line.strip()]
    layout = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ([\w.]+): .*")
    others = [line for line in lines if not layout.fullmatch(line)]
    assert not others, others
    records = [layout.fullmatch(line).groups() for line in lines]
    assert ("INFO", "farm.coordinator") in records and ("WARNING", "farm.coordinator") in records, lines
    assert not [line for (level, logger), line in zip(records, lines)
                if not logger.startswith("farm") and level in ("DEBUG", "INFO")]


@pytest.mark.slow  # a coordinator and an agent start, and a 2-trial job runs: ~20-40 s
@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_agent_json_lines_name_the_agent_job_and_shard(make_cluster, monkeypatch):
    """An agent told FARM_LOG_FORMAT=json writes only JSON lines, none of a library below warning
    (alembic's seven at every start, once), and each record names what it is about: the agent
    once it has registered, the job and shard it tunes, the job it validates."""
    monkeypatch.setenv("FARM_LOG_FORMAT", "json")
    cluster = make_cluster()
    cluster.start_coordinator()
    # Metrics beyond loopback on a farm without a token: its warning is a JSON line too.
    cluster.start_agent("agent-1", options=("--metrics-listen", "0.0.0.0:0"))
    [agent] = cluster.wait_agents(1)
    submitted = json.loads(cluster.farm("submit", "mlp-tiny", "llvm", "1", "--trials", "2", "--runs", "2",
                                        "--json", "--timeout", "300").stdout)
    assert submitted["state"] == "succeeded", submitted
    job_id = submitted["job"]
    shard_id = f"{job_id}.s0"
    wait_for(lambda: f"validated {job_id}" in cluster.log("agent-1"), 30, "the agent's validation record")
    cluster.close()

    records = []
    for line in cluster.log("agent-1").splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError:
                pytest.fail(f"not a JSON line: {line!r}")
    assert any(r["level"] == "warning" and "metrics listens on 0.0.0.0:0, beyond loopback" in r["message"]
               for r in records), records
    libraries = [r for r in records if r["logger"].split(".")[0] in LIBRARIES and r["level"] in ("debug", "info")]
    assert not libraries, libraries
    registered = next(i for i, r in enumerate(records) if r["message"].startswith("registered as "))
    assert all(r.get("agent_id") == agent["id"] for r in records[registered:]), records[registered:]

    def about(prefix: str) -> dict:
        return next(r for r in records if r["message"].startswith(prefix))

    for record in (about(f"tuning {shard_id} "), about(f"{shard_id} done: ")):
        assert (record.get("job_id"), record.get("shard_id")) == (job_id, shard_id), record
    for record in (about(f"validating the library of {job_id}"), about(f"validated {job_id}")):
        assert record.get("job_id") == job_id, record
    planned = next(json.loads(line) for line in cluster.log("coordinator").splitlines()
                   if line.strip() and json.loads(line)["message"].startswith(f"job {job_id}: "))
    assert planned.get("job_id") == job_id, planned


def test_a_daemon_that_cannot_start_says_why_in_a_json_line(farm_exe, tmp_path):
    """Its last word, `error: <what> (<what to do>)` in text, is a JSON record like the rest."""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE foo (x)")
    command = [farm_exe, "coordinator", "--registry", f"sqlite:///{other}", "--listen", "127.0.0.1:0",
               "--tracker-listen", "127.0.0.1:0"]
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"), "FARM_LOG_FORMAT": "json"}
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 4, refused.stderr
    records = []
    for line in refused.stderr.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
    last = records[-1]
    assert last["level"] == "error" and "is not a farm registry: it holds other tables (foo)" in last["message"]
    assert "point --registry at a farm registry" in last["message"], last
    text = subprocess.run(command, env={**env, "FARM_LOG_FORMAT": "text"}, capture_output=True, text=True, timeout=120)
    assert text.returncode == 4 and text.stderr.splitlines()[-1].startswith("error: "), text.stderr
