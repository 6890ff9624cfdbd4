"""Durations as people read them, in the unit that fits: what job statuses and the CLI's listings say."""

from __future__ import annotations


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
    """A latency given in milliseconds, as ``duration`` says it."""
    return "-" if ms is None else duration(ms / 1e3)
