"""Durations, sizes and speed-ups as people read them, in the unit that fits: what job statuses, reports and the
CLI's listings say."""

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


def size(num_bytes: int | None) -> str:
    """A file's size in decimal units: 512 B, 2.2 MB."""
    if num_bytes is None:
        return "-"
    value = float(num_bytes)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1000
    return f"{value:.3g} GB"


def speedup_text(untuned: float, tuned: float) -> str:
    """The tuned time against the untuned one: 1.70x faster, 1.20x slower."""
    ratio = untuned / tuned
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
