"""bench/results_page.py: the committed docs/benchmarks.md is what it generates from docs/results/."""

import re
from pathlib import Path

import pytest
import results_page

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_page_is_what_the_script_generates():
    assert (ROOT / "docs" / "benchmarks.md").read_text() == results_page.render(), (
        "docs/benchmarks.md is stale: run .venv/bin/python bench/results_page.py --write")


def test_the_page_stays_under_600_lines():
    assert results_page.render().count("\n") < 600


def test_every_raw_result_the_index_or_the_page_names_exists():
    index = results_page.load_index()
    named = {row["file"] for rows in index.values() if isinstance(rows, list) for row in rows if "file" in row}
    linked = set(re.findall(r"\]\(results/([^)]+)\)", results_page.render())) - {""}
    assert named and named <= linked
    assert not [name for name in linked if not (ROOT / "docs" / "results" / name).is_file()]


def test_every_row_names_a_known_cpu_kind_and_hand_carried_rows_their_source():
    index = results_page.load_index()
    for rows in (rows for rows in index.values() if isinstance(rows, list)):
        for row in rows:
            assert row["cpu"] in index["cpus"], row
            assert "file" in row or row.get("from"), row


def test_a_compare_report_is_read_and_anything_else_refused():
    text = (ROOT / "docs" / "results" / "compare-resnet-18-b1-40-zen5.txt").read_text()
    assert results_page.read_compare_text(text) == {"trials": 535, "farm_ms": 10.9, "ort_ms": 8.6}
    with pytest.raises(ValueError):
        results_page.read_compare_text("resnet-18 batch 1\n")
