"""What bench/coordinator_scale.py reads off a run: percentiles, report waves, answers that came
beside slow heartbeats, and CPU seconds of the processes involved."""

from __future__ import annotations

import bisect
import math

import psutil


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def answers_beside_slow_heartbeats(results, window_start: float, window_end: float, within: float = 0.05) -> dict:
    """How many report answers reached the clients in the ``within`` seconds before a heartbeat's
    answer: for the slowest 1% of heartbeats and for all of them.

    If slow heartbeats waited behind a group commit's answers, which reach the coordinator's
    event loop together, they come back among many report answers.
    """
    report_ends, beats = [], []
    for _kind, calls, _counters in results:
        report_ends += [start + seconds for start, seconds, _ in calls.get("report", [])]
        beats += [(seconds, start + seconds) for start, seconds, _ in calls.get("heartbeat", [])
                  if window_start <= start < window_end]
    if not beats or not report_ends:
        return {}
    report_ends.sort()

    def answers_before(end: float) -> int:
        return bisect.bisect_right(report_ends, end) - bisect.bisect_left(report_ends, end - within)

    beats.sort()
    slow = beats[-max(1, len(beats) // 100):]
    return {"within_s": within,
            "slowest_1pct": sum(answers_before(end) for _, end in slow) / len(slow),
            "all": sum(answers_before(end) for _, end in beats) / len(beats)}


def report_waves(results, window_start: float, window_end: float, slot: float = 0.2) -> dict:
    """Reports sent per ``slot`` seconds of the window, all clients together: the mean, and the
    busiest slot's count. Agents that report in step send in waves (coordinator.fleet.report_sizing)."""
    slots = [0] * max(1, int((window_end - window_start) / slot))
    for _kind, calls, _counters in results:
        for start, _seconds, _ok in calls.get("report", []):
            if window_start <= start < window_end:
                slots[min(len(slots) - 1, int((start - window_start) / slot))] += 1
    return {"slot_s": slot, "mean": sum(slots) / len(slots), "max": max(slots),
            "empty_share": slots.count(0) / len(slots)}


def cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    seconds = {}
    for proc in procs:
        try:
            times = proc.cpu_times()
            seconds[proc.pid] = times.user + times.system
        except psutil.Error:
            pass
    return seconds


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two readings by the processes alive at both."""
    return sum(after[pid] - before[pid] for pid in before.keys() & after.keys())


def postgres_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] and proc.info["name"].startswith("postgres"):
            found.append(proc)
    return found
