"""Numbers as people read them: durations, rates, sizes and ages in the unit that fits."""

from __future__ import annotations

import datetime as dt


def duration(seconds: float | None) -> str:
    """12.3 us, 4.56 ms, 1.23 s, 2m05s, 3h20m: three significant figures below a minute."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def milliseconds(ms: float | None) -> str:
    return "-" if ms is None else duration(ms / 1e3)


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
