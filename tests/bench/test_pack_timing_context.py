"""bench/pack_timing_context.py: a CPU kind's A/B written into its own pack, and only its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pack_timing_context
import pytest

from foundation.registry.packs import read_pack, read_pack_header
from foundation.registry.shipped_packs import (
    TIMING_CONTEXT_KEY,
    TIMING_CONTEXTS_TRIED_KEY,
    shipped_hardware_timing,
    shipped_packs,
)

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
ZEN4, ZEN5 = "cpu-50c3c6678701", "cpu-3e332858eccb"
ZEN4_AB = [RESULTS / f"timing-context-auto-{name}-zen4-2026-12-04.json" for name in ("resnet-18", "bert")]
ZEN5_AB = RESULTS / "timing-context-auto-resnet-18-zen5-2026-12-04.json"


@pytest.fixture
def packs(tmp_path):
    """Copies of the Zen 4's and the Zen 5's shipped packs."""
    for path in shipped_packs():
        if path.stem in (ZEN4, ZEN5):
            shutil.copy(path, tmp_path / path.name)
    return tmp_path


def test_an_ab_that_beat_warm_is_written_into_its_pack_and_the_rows_stay(packs, capsys):
    pack = packs / f"{ZEN5}.farmpack"
    tables = read_pack_header(pack)["tables"]
    records = _records(pack)
    assert pack_timing_context.main([str(pack), str(ZEN5_AB)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["written"] and printed[TIMING_CONTEXT_KEY]["context"] == "auto"
    header = read_pack_header(pack)
    assert header[TIMING_CONTEXT_KEY]["ratios"] == [round(r, 4) for r in json.loads(ZEN5_AB.read_text())[
        "context_over_warm_by_pair"]]
    assert header[TIMING_CONTEXT_KEY]["evidence"] == [ZEN5_AB.name] and header["cpu"] == "AMD EPYC (family 26 model 2)"
    assert header["refreshed"]  # the rest of the header is kept
    # And its rows, which still load (their digests check), as this version writes them (a column added
    # since the pack was written gains its value: tuning_records.timing_context).
    assert {name: t["rows"] for name, t in header["tables"].items()} == {name: t["rows"] for name, t in tables.items()}
    assert _records(pack) == records
    chosen = shipped_hardware_timing(ZEN5, packs)
    assert chosen.context.value == "auto" and chosen.wins == 4


def test_an_ab_that_did_not_beat_warm_writes_warm_and_a_dry_run_writes_nothing(packs, capsys):
    pack = packs / f"{ZEN4}.farmpack"
    before = pack.read_bytes()
    assert pack_timing_context.main([str(pack), *map(str, ZEN4_AB), "--dry-run"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert not printed["written"] and printed[TIMING_CONTEXT_KEY]["context"] == "warm"
    assert printed[TIMING_CONTEXT_KEY]["ratios"] and printed[TIMING_CONTEXT_KEY]["tried"] == "auto"
    assert pack.read_bytes() == before
    assert pack_timing_context.main([str(pack), *map(str, ZEN4_AB)]) == 0
    assert shipped_hardware_timing(ZEN4, packs).context.value == "warm"


def test_a_second_context_that_lost_leaves_the_first_ones_win_standing_and_one_that_won_more_replaces_it(
        packs, tmp_path, capsys):
    pack = packs / f"{ZEN5}.farmpack"
    assert pack_timing_context.main([str(pack), str(ZEN5_AB)]) == 0  # auto won: 0.865, 4 of 5
    capsys.readouterr()

    def producer_ab(name, ratios):
        path = tmp_path / name
        path.write_text(json.dumps({**json.loads(ZEN5_AB.read_text()), "context": "producer",
                                    "context_over_warm_by_pair": ratios}))
        return str(path)

    assert pack_timing_context.main([str(pack), producer_ab("lost.json", [0.83, 1.14, 0.96])]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["this_ab"]["context"] == "warm" and printed[TIMING_CONTEXT_KEY]["context"] == "auto"
    header = read_pack_header(pack)
    assert [e["tried"] for e in header[TIMING_CONTEXTS_TRIED_KEY]] == ["auto", "producer"]
    assert shipped_hardware_timing(ZEN5, packs).context.value == "auto"
    # The same context asked again replaces its own A/B; this time it beat auto's median.
    assert pack_timing_context.main([str(pack), producer_ab("won.json", [0.7, 0.75, 0.8])]) == 0
    header = read_pack_header(pack)
    assert [(e["tried"], e["evidence"]) for e in header[TIMING_CONTEXTS_TRIED_KEY]] == [
        ("auto", [ZEN5_AB.name]), ("producer", ["won.json"])]
    assert shipped_hardware_timing(ZEN5, packs).context.value == "producer"


def test_another_kinds_ab_too_few_pairs_and_no_pack_are_refused_with_their_codes(packs, tmp_path, capsys):
    pack = packs / f"{ZEN4}.farmpack"
    before = pack.read_bytes()
    assert pack_timing_context.main([str(pack), str(ZEN5_AB)]) == 2
    assert "was measured on 'AMD EPYC (family 26 model 2)', the pack on 'AMD EPYC (family 25 model 17)'" in \
        capsys.readouterr().err
    two = tmp_path / "two.json"
    two.write_text(json.dumps({**json.loads(ZEN4_AB[0].read_text()), "context_over_warm_by_pair": [0.8, 0.9]}))
    assert pack_timing_context.main([str(pack), str(two)]) == 2
    assert "2 A/B pair(s) with positive ratios are too few" in capsys.readouterr().err
    (tmp_path / "junk.json").write_text("{}")
    assert pack_timing_context.main([str(pack), str(tmp_path / "junk.json")]) == 2
    assert "is not a bench/cache_flush.py result" in capsys.readouterr().err
    assert pack.read_bytes() == before
    assert pack_timing_context.main([str(tmp_path / "none.farmpack"), str(ZEN5_AB)]) == 3
    assert "no pack at" in capsys.readouterr().err


def _records(pack: Path) -> list:
    store, _header = read_pack(pack)
    try:
        return store.records.all_records()
    finally:
        store.dispose()
