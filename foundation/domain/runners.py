"""When the process running an embedded job is gone (pure: what was observed in, a verdict out).

An embedded job is run by one `farm submit` process. It records that process (host, pid,
start time) and moves a heartbeat every `HEARTBEAT_INTERVAL_S`. A reader judges it:

- on the runner's own host, by the process table: the runner is gone when its pid is not
  running, or runs a process that started at another time (the pid was reused). A live
  process is never judged by its heartbeat (it may be suspended, or busy in a long build);
- from another host, by the heartbeat alone: gone once it is older than `HEARTBEAT_TTL_S`,
  which is generous so that clock skew between hosts and a loaded database do not kill
  live jobs.

The same rule decides when a tuning lock's holder is gone and its lock may be taken over.
"""

from __future__ import annotations

from dataclasses import dataclass

HEARTBEAT_INTERVAL_S = 5.0
HEARTBEAT_TTL_S = 120.0
# Start times are read from /proc at a resolution of a clock tick (10 ms); equal processes
# agree to well within this.
START_TIME_TOLERANCE_S = 1.0


@dataclass(frozen=True)
class Runner:
    """The process that runs a job: its host name, pid and start time (epoch seconds)."""

    host: str
    pid: int
    started_at: float

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def runner_gone(
    runner: Runner,
    heartbeat_at: float,
    now: float,
    *,
    here: str,
    start_time_here: float | None,
    ttl: float = HEARTBEAT_TTL_S,
) -> str | None:
    """Why ``runner`` is gone, or None while it may still be running.

    ``here`` is the host name of the process judging; ``start_time_here`` is the start time
    of the process that has ``runner.pid`` on this host (None when no process has it), and
    is only looked at when the runner is on this host. ``heartbeat_at`` is the runner's last
    beat (its creation time before the first). Times are epoch seconds.
    """
    if runner.host == here:
        if start_time_here is None:
            return f"its process ({runner.describe()}) is gone"
        if abs(start_time_here - runner.started_at) > START_TIME_TOLERANCE_S:
            return f"its process ({runner.describe()}) is gone; the pid now belongs to another process"
        return None
    silent = now - heartbeat_at
    if silent > ttl:
        return f"no heartbeat from {runner.describe()} for {silent:.0f} s (more than {ttl:.0f} s)"
    return None
