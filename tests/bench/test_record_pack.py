"""bench/record_pack.py through real processes: a pack recorded cold, then deepened from the shipped packs
(--from-packs), keeping only this fingerprint's records."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from foundation.config import SHIPPED_PACKS_DIR_ENV, SHIPPED_PACKS_ENV
from foundation.domain.timing_context import TimingContext, choose_hardware_timing
from foundation.registry.packs import read_pack, write_pack
from foundation.registry.shipped_packs import TIMING_CONTEXT_KEY, shipped_packs

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench"
OTHER_KIND = "cpu-50c3c6678701"  # the Zen 4's shipped pack


def record(out: Path, homes: Path, *extra: str) -> dict:
    env = {**os.environ, SHIPPED_PACKS_DIR_ENV: str(out)}
    env.pop(SHIPPED_PACKS_ENV, None)
    done = subprocess.run([sys.executable, str(BENCH / "record_pack.py"), "--models", "mlp-tiny",
                           "--trials-per-task", "2", "--out", str(out), "--homes", str(homes), *extra],
                          capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def own_records(pack: Path) -> tuple[int, set[str], dict]:
    store, header = read_pack(pack)
    try:
        fingerprints = {f.id for f in store.list_fingerprints()}
        return store.records.count_records(), fingerprints, header
    finally:
        store.dispose()


def test_a_pack_recorded_cold_then_deepened_from_the_packs(tmp_path):
    out = tmp_path / "packs"
    out.mkdir()
    [other] = [p for p in shipped_packs() if p.stem == OTHER_KIND]
    first = Path(record(out, tmp_path / "cold", "--no-artifacts")["pack"])
    assert first.stem != OTHER_KIND, "this test needs a box of another kind than the Zen 4 pack's"
    cold_count, fingerprints, header = own_records(first)
    assert cold_count > 0 and fingerprints == {first.stem}
    assert len(header["tuned_with"]) == 1 and "--cold" in header["tuned_with"][0]

    # A choice pack_timing_context wrote into the header outlives the pack being recorded again.
    store, header = read_pack(first)
    chosen = choose_hardware_timing(TimingContext.AUTO, (0.8, 0.85, 0.9), ["ab.json"]).to_json()
    write_pack(store, first, {k: v for k, v in header.items() if k != "tables"} | {TIMING_CONTEXT_KEY: chosen})
    store.dispose()

    # The deepening home loads every pack in the directory, another kind's too; the pack takes only its own.
    shutil.copy(other, out / other.name)
    deeper = record(out, tmp_path / "deeper", "--from-packs")
    assert deeper["results"][-1]["trials"] > 0
    count, fingerprints, header = own_records(first)
    assert fingerprints == {first.stem} and count > cold_count
    assert "--retune" in header["tuned_with"][1] and "--from-packs" in header["command"]
    assert header["tables"]["artifacts"]["rows"] == 1  # the deepened library, which serves the next hit
    assert header[TIMING_CONTEXT_KEY] == chosen
