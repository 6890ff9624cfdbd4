"""Yes/no environment variables read one way: 1/true/yes/on or 0/false/no/off, unset or blank the
default, anything else refused naming the variable."""

from __future__ import annotations

import pytest

from foundation.config import (
    CPU_CACHE_FLUSH_ENV,
    FORK_WORKERS_ENV,
    KEEP_SLOWER_ENV,
    SWITCHES,
    check_switches,
    cpu_cache_flush,
    env_flag,
    fork_workers,
    keep_slower_tuned,
)
from foundation.errors import BadInput


@pytest.mark.parametrize(("value", "default", "expected"), [
    (None, True, True), (None, False, False), ("", True, True), (" ", False, False),
    ("1", False, True), ("yes", False, True), ("TRUE", False, True),
    ("0", True, False), ("no", True, False), (" False ", True, False),
    ("on", False, True), ("ON", False, True), ("off", True, False), ("Off", True, False),
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


def test_off_turns_cache_flushing_off(monkeypatch):
    monkeypatch.setenv(CPU_CACHE_FLUSH_ENV, "off")
    assert cpu_cache_flush() is False
    monkeypatch.setenv(CPU_CACHE_FLUSH_ENV, "on")
    assert cpu_cache_flush() is True


@pytest.mark.parametrize("value", ["maybe", "2", "enabled", "nein", "y"])
def test_anything_else_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("FARM_TEST_FLAG", value)
    with pytest.raises(BadInput) as refused:
        env_flag("FARM_TEST_FLAG", True)
    assert refused.value.problem == f"FARM_TEST_FLAG={value!r} is neither yes nor no"
    assert refused.value.fix == "set FARM_TEST_FLAG to 1, true, yes or on, or to 0, false, no or off; unset, it is on"


def test_every_switch_is_checked(monkeypatch):
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    check_switches()
    for name in SWITCHES:
        monkeypatch.setenv(name, "perhaps")
        with pytest.raises(BadInput, match=f"^{name}='perhaps' is neither yes nor no "):
            check_switches()
        monkeypatch.setenv(name, "off")
    check_switches()


def test_a_command_stops_at_a_mistyped_switch(monkeypatch, capsys, tmp_path):
    import sys

    from farm.cli.app import _debugging, main

    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(CPU_CACHE_FLUSH_ENV, "sometimes")
    monkeypatch.setattr(sys, "argv", ["farm", "jobs"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [f"error: {CPU_CACHE_FLUSH_ENV}='sometimes' is neither yes nor no (set {CPU_CACHE_FLUSH_ENV} to "
                     "1, true, yes or on, or to 0, false, no or off; unset, it is off)"]
    monkeypatch.setenv("FARM_DEBUG", "0")
    assert _debugging() is False
    monkeypatch.setenv("FARM_DEBUG", "on")
    assert _debugging() is True
