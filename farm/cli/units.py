"""Numbers as people read them: durations, rates, sizes and ages in the unit that fits."""

from __future__ import annotations

import datetime as dt

# Job statuses, written by both daemons, say latencies in the same units as the listings.
from foundation.units import duration, milliseconds

__all__ = ["age", "duration", "milliseconds", "rate", "seconds_short", "size"]


def seconds_short(seconds: float) -> str:
    """A fixed-width elapsed time for log lines: '   18.8s'."""
    return f"{seconds:7.1f}s"


def rate(count: float, seconds: float, unit: str = "trials") -> str:
    per_second = count / seconds if seconds > 0 else 0.0
    return f"{per_second:.3g} {unit}/s"


def size(num_bytes: int | None) -> str:
    if num_bytes is None:
        return "-"
    value = float(num_bytes)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1000
    return f"{value:.3g} GB"


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
