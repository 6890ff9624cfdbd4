"""The suite's own work queue (support.scheduling): longest units first, a quiet_box unit once
the long ones are handed out, a spread file's tests one unit each."""

from __future__ import annotations

import json

import pytest

from support import scheduling


def _items(pytester, source: dict[str, str]) -> list:
    pytester.makeini("[pytest]\nmarkers =\n    slow: x\n    quiet_box: y\n")
    for name, body in source.items():
        pytester.makepyfile(**{name: body})
    items, _ = pytester.inline_genitems()
    return items


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    def record(seconds: dict[str, float]) -> None:
        path = tmp_path / "durations.json"
        path.write_text(json.dumps(seconds))
        monkeypatch.setattr(scheduling, "DURATIONS", path)
    return record


def test_long_units_first_then_the_quiet_one_then_the_short(pytester, recorded):
    items = _items(pytester, {
        "test_short": "def test_a(): pass\n",
        "test_quiet": "import pytest\npytestmark = pytest.mark.quiet_box\ndef test_q(): pass\ndef test_r(): pass\n",
        "test_long": "def test_l(): pass\n",
        "test_medium": "def test_m(): pass\n",
    })
    recorded({"test_short.py::test_a": 1.0, "test_quiet.py::test_q": 100.0, "test_quiet.py::test_r": 90.0,
              "test_long.py::test_l": 60.0, "test_medium.py::test_m": scheduling.QUIET_AFTER_S})
    scheduling.order_longest_first(items)
    # The quiet unit is the longest, yet goes after every unit of QUIET_AFTER_S or more; its
    # tests stay together and in their order.
    assert [item.nodeid for item in items] == [
        "test_long.py::test_l", "test_medium.py::test_m", "test_quiet.py::test_q", "test_quiet.py::test_r",
        "test_short.py::test_a"]


def test_a_test_missing_from_the_record_is_guessed_by_its_marker(pytester, recorded):
    items = _items(pytester, {
        "test_new": "import pytest\n@pytest.mark.slow\ndef test_n(): pass\n",
        "test_old": "def test_o(): pass\n",
    })
    recorded({"test_old.py::test_o": scheduling.UNKNOWN_SLOW_S - 1})
    scheduling.order_longest_first(items)
    assert [item.nodeid for item in items] == ["test_new.py::test_n", "test_old.py::test_o"]


def test_a_spread_file_is_one_unit_per_test_and_any_other_file_one_unit():
    spread = sorted(scheduling.SPREAD_FILES)[0]
    assert scheduling.work_unit(f"{spread}::test_x[sqlite]") == f"{spread}::test_x[sqlite]"
    assert scheduling.work_unit("tests/farm/test_embedded.py::test_x") == "tests/farm/test_embedded.py"
