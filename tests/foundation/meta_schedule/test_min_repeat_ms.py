"""How long a candidate's calls repeat for one timing (FARM_MIN_REPEAT_MS): 40 ms unset, the
variable's whole milliseconds otherwise, a bad value refused in one line before anything runs."""

from __future__ import annotations

import pytest

from foundation.config import MIN_REPEAT_MS_ENV
from foundation.errors import BadInput
from foundation.meta_schedule.measure import MeasureSettings

from support.farm_inprocess import run_farm_inprocess


@pytest.mark.parametrize(("value", "ms"), [(None, 40), ("", 40), (" 5 ", 5), ("0", 0), ("60000", 60_000)])
def test_the_environment_sets_the_default_and_an_explicit_value_wins(monkeypatch, value, ms):
    if value is None:
        monkeypatch.delenv(MIN_REPEAT_MS_ENV, raising=False)
    else:
        monkeypatch.setenv(MIN_REPEAT_MS_ENV, value)
    assert MeasureSettings(cache_flush=False).evaluator_config("llvm").min_repeat_ms == ms
    assert MeasureSettings(cache_flush=False).evaluator_config("cuda").min_repeat_ms == ms
    assert MeasureSettings(min_repeat_ms=7).min_repeat_ms == 7


@pytest.mark.parametrize("value", ["abc", "-5", "2.5", "60001", "9" * 30, "\u00b2"])
def test_a_bad_value_is_one_line_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(MIN_REPEAT_MS_ENV, value)
    with pytest.raises(BadInput, match=f"^{MIN_REPEAT_MS_ENV}=.* is not a whole number of milliseconds"):
        MeasureSettings()


@pytest.mark.parametrize("command", [["submit", "mlp-tiny", "llvm", "1", "--trials", "8"],
                                     ["agent", "--coordinator", "127.0.0.1:1"]])
def test_submit_and_agent_refuse_a_bad_value_before_they_start(tmp_path, command):
    done = run_farm_inprocess(*command, home=tmp_path / "home", env={MIN_REPEAT_MS_ENV: "fast"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {MIN_REPEAT_MS_ENV}='fast' is not a whole number of milliseconds from 0 to 60000 "
        f"(set it to e.g. {MIN_REPEAT_MS_ENV}=40, or unset it for 40)"]
    assert done.stdout == "" and not list(tmp_path.rglob("registry.db"))  # refused before a registry or job
