"""bench/refresh_packs.py: a shipped pack's peak corrected only on its own kernels' evidence, once."""

from __future__ import annotations

import shutil

import pytest
import refresh_packs
from sqlalchemy import update

from foundation.registry.packs import read_pack
from foundation.registry.schema import FingerprintRow
from foundation.registry.session import Changes
from foundation.registry.shipped_packs import shipped_packs


@pytest.fixture
def zen4_pack(tmp_path):
    [path] = [p for p in shipped_packs() if p.name == "cpu-50c3c6678701.farmpack"]
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    store, _header = read_pack(copy)
    yield store
    store.dispose()


def _with_device(store, device):
    [fingerprint] = store.list_fingerprints()
    with store.unit_of_work.write(Changes.STATE) as session:
        session.execute(update(FingerprintRow).where(FingerprintRow.id == fingerprint.id)
                        .values(details={**fingerprint.details, "device": device}))
    return fingerprint.id


def test_bad_arguments_and_no_pack_exit_with_their_codes(tmp_path, capsys):
    assert refresh_packs.main(["--packs", str(tmp_path), "--kernel-margin", "1.0"]) == 2
    assert "--kernel-margin" in capsys.readouterr().err
    assert refresh_packs.main(["--packs", str(tmp_path)]) == 3
    assert "no pack" in capsys.readouterr().err


def test_a_one_core_peak_is_scaled_where_the_packs_kernels_beat_it_and_only_once(zen4_pack):
    evidence = refresh_packs.pack_evidence(zen4_pack)
    assert "peak_gflops_one_core" in evidence["device"]  # as shipped: corrected
    assert refresh_packs.correct_peak(zen4_pack, evidence, 1.9, 1.3)["changed"] is False

    one_core = evidence["device"]["peak_gflops_one_core"]
    device = {k: v for k, v in evidence["device"].items() if k != "peak_gflops_one_core"}
    fingerprint = _with_device(zen4_pack, {**device, "peak_gflops": one_core})
    done = refresh_packs.correct_peak(zen4_pack, refresh_packs.pack_evidence(zen4_pack), 1.9, 1.3)
    assert done["changed"] and done["peak_gflops"] == round(one_core * 1.9, 2)
    assert zen4_pack.get_fingerprint(fingerprint).details["device"]["peak_gflops_one_core"] == one_core

    # A peak the kernels do not beat by the margin is no evidence of one core: it is kept.
    _with_device(zen4_pack, {**device, "peak_gflops": evidence["fastest_kernels"][0]["gflops"]})
    kept = refresh_packs.correct_peak(zen4_pack, refresh_packs.pack_evidence(zen4_pack), 1.9, 1.3)
    assert kept["changed"] is False and "no evidence" in kept["why"]
