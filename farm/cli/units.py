"""Numbers as the CLI's listings and progress lines say them: rates, ages and fixed-width elapsed times (durations,
sizes and speed-ups, which reports and job statuses say too, are foundation.units')."""

from __future__ import annotations

import datetime as dt


def seconds_short(seconds: float) -> str:
    """A fixed-width elapsed time for log lines: '   18.8s'."""
    return f"{seconds:7.1f}s"


def rate(count: float, seconds: float, unit: str = "trials") -> str:
    per_second = count / seconds if seconds > 0 else 0.0
    return f"{per_second:.3g} {unit}/s"


def age(when: dt.datetime | None, now: dt.datetime | None = None) -> str:
    """How long ago, as kubectl's AGE column says it: 45s, 12m, 5h, 3d."""
    if when is None:
        return "-"
    now = now or dt.datetime.now(dt.timezone.utc)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    seconds = max(0, int((now - when).total_seconds()))
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds // span}{unit}"
    return f"{seconds}s"
