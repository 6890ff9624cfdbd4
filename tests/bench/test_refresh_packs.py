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


def _this_box(store, device):
    """A box of the pack's own fingerprint whose probes read ``device``."""
    from foundation.hardware.fingerprint import fingerprint_from_details

    [fingerprint] = store.list_fingerprints()
    return fingerprint_from_details("cpu", {**fingerprint.details, "device": device})


def test_the_pack_of_this_boxs_fingerprint_takes_its_newer_quiet_probe_once(zen4_pack):
    device = {k: v for k, v in refresh_packs.pack_evidence(zen4_pack)["device"].items()
              if k != "peak_gflops_one_core"}
    fingerprint = _with_device(zen4_pack, {**device, "probe_version": 2, "peak_gflops": 150.0})
    probed = {**device, "probe_version": 3, "probe_load": 0.1, "peak_gflops": 190.5}
    own = _this_box(zen4_pack, probed)
    assert own.id == fingerprint  # device features are outside the id

    busy = refresh_packs.own_device(zen4_pack, refresh_packs.pack_evidence(zen4_pack),
                                    _this_box(zen4_pack, {**probed, "probe_load": 1.4}))
    assert busy["changed"] is False and "busy" in busy["why"]
    assert zen4_pack.get_fingerprint(fingerprint).details["device"]["peak_gflops"] == 150.0

    done = refresh_packs.own_device(zen4_pack, refresh_packs.pack_evidence(zen4_pack), own)
    assert done["changed"] and (done["was"], done["peak_gflops"]) == (150.0, 190.5)
    stored = zen4_pack.get_fingerprint(fingerprint).details["device"]
    assert stored == own.details["device"] and (stored["probe_version"], stored["peak_gflops"]) == (3, 190.5)

    again = refresh_packs.own_device(zen4_pack, refresh_packs.pack_evidence(zen4_pack), own)
    assert again["changed"] is False and "not newer" in again["why"]


def test_another_fingerprints_pack_keeps_its_features(zen4_pack, tmp_path):
    [zen3] = [p for p in shipped_packs() if p.name == "cpu-0a33b4984148.farmpack"]
    shutil.copy(zen3, tmp_path / zen3.name)
    other, _header = read_pack(tmp_path / zen3.name)
    try:
        device = refresh_packs.pack_evidence(other)["device"]
        own = _this_box(other, {**device, "probe_version": 9, "probe_load": 0.0})
    finally:
        other.dispose()
    before = refresh_packs.pack_evidence(zen4_pack)["device"]
    kept = refresh_packs.own_device(zen4_pack, refresh_packs.pack_evidence(zen4_pack), own)
    assert kept["changed"] is False and "not this box's fingerprint" in kept["why"]
    assert refresh_packs.pack_evidence(zen4_pack)["device"] == before
