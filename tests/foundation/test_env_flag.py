"""Yes/no environment variables read one way: 1/true/yes or 0/false/no, unset or empty the default."""

from __future__ import annotations

import pytest

from foundation.config import FORK_WORKERS_ENV, KEEP_SLOWER_ENV, env_flag, fork_workers, keep_slower_tuned


@pytest.mark.parametrize(("value", "default", "expected"), [
    (None, True, True), (None, False, False), ("", True, True), (" ", False, False),
    ("1", False, True), ("yes", False, True), ("TRUE", False, True),
    ("0", True, False), ("no", True, False), (" False ", True, False),
])
def test_env_flag(monkeypatch, value, default, expected):
    if value is None:
        monkeypatch.delenv("FARM_TEST_FLAG", raising=False)
    else:
        monkeypatch.setenv("FARM_TEST_FLAG", value)
    assert env_flag("FARM_TEST_FLAG", default) is expected


def test_the_farms_flags_and_their_defaults(monkeypatch):
    monkeypatch.delenv(KEEP_SLOWER_ENV, raising=False)
    monkeypatch.delenv(FORK_WORKERS_ENV, raising=False)
    assert keep_slower_tuned() is False and fork_workers() is True
    monkeypatch.setenv(KEEP_SLOWER_ENV, "1")
    monkeypatch.setenv(FORK_WORKERS_ENV, "0")
    assert keep_slower_tuned() is True and fork_workers() is False
