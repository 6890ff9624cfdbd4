"""The farm's one clock: the time now, timezone-aware in UTC, as every stored timestamp is."""

from __future__ import annotations

import datetime as dt


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)
