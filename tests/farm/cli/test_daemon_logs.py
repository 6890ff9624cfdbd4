"""A real `farm coordinator` told FARM_LOG_FORMAT=json writes nothing but JSON lines, and no library chatter."""

from __future__ import annotations

import json

import pytest

from support.polling import wait_for


@pytest.mark.slow  # a real coordinator and its tracker start: ~10-25 s
@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_coordinator_logs_json_lines(make_cluster, monkeypatch):
    monkeypatch.setenv("FARM_LOG_FORMAT", "json")
    monkeypatch.setenv("FARM_LOG_LEVEL", "debug")  # the farm's debug records, and still no library's INFO
    cluster = make_cluster()
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
    chatter = [r for r in records if not r["logger"].startswith("farm") and r["level"] in ("debug", "info")]
    assert not chatter, chatter
