"""When the runner of an embedded job is gone: same host by the process table, other hosts by heartbeat."""

from __future__ import annotations

from foundation.domain.runners import HEARTBEAT_TTL_S, Runner, runner_gone

RUNNER = Runner("box-a", 4242, 1000.0)


def test_on_its_host_a_live_process_is_never_judged_by_its_heartbeat():
    assert runner_gone(RUNNER, heartbeat_at=0.0, now=10_000.0, here="box-a", start_time_here=1000.0) is None
    assert runner_gone(RUNNER, heartbeat_at=0.0, now=10_000.0, here="box-a", start_time_here=1000.4) is None


def test_on_its_host_a_dead_or_reused_pid_is_gone():
    assert "is gone" in runner_gone(RUNNER, 999.0, 1000.0, here="box-a", start_time_here=None)
    reused = runner_gone(RUNNER, 999.0, 1000.0, here="box-a", start_time_here=5000.0)
    assert "another process" in reused and "pid 4242 on box-a" in reused


def test_from_another_host_only_the_heartbeat_counts():
    fresh = runner_gone(RUNNER, heartbeat_at=1000.0, now=1000.0 + HEARTBEAT_TTL_S, here="box-b",
                        start_time_here=None)
    assert fresh is None
    stale = runner_gone(RUNNER, heartbeat_at=1000.0, now=1001.0 + HEARTBEAT_TTL_S, here="box-b",
                        start_time_here=None)
    assert stale.startswith("no heartbeat from pid 4242 on box-a for 121 s")
