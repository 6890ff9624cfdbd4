"""Every pack tvm-farm ships carries a cross cost model this farm reads (its device columns are
today's), trained on the records of every shipped pack: a new registry on a box no pack holds
starts its first job from it instead of training one first (foundation.meta_schedule.warm)."""

from __future__ import annotations

import pytest

from foundation.domain.device_probes import PROBE_KEY
from foundation.registry.packs import read_pack
from foundation.registry.shipped_packs import shipped_packs


@pytest.fixture(scope="module")
def packs():
    opened = [read_pack(path) for path in shipped_packs()]
    yield opened
    for store, _header in opened:
        store.dispose()


def test_each_shipped_packs_cross_model_is_read_by_this_farm(packs):
    from foundation.meta_schedule.warm.cross_model import KIND, model_from_bytes

    assert packs, "tvm-farm ships packs"
    fingerprints = {f.id for store, _header in packs for f in store.list_fingerprints()}
    for store, header in packs:
        [stored] = store.cost_models.of_kind(header["tvm_version"], KIND)
        model = model_from_bytes(store.cost_models.blob(stored))  # raises for a format this farm refuses
        assert model.device_fields and model.program_width == 164
        trained_on = header["refreshed"][-1]["cross_cost_model"]
        assert trained_on["sha256"] == stored.sha256 and set(trained_on["fingerprints"]) == fingerprints


def test_a_shipped_peak_is_every_cores_or_says_it_was_one_cores(packs):
    for store, header in packs:
        [fingerprint] = store.list_fingerprints()
        device = fingerprint.details["device"]
        # Probe version 1 measured one core in `farm submit`: corrected where the pack's kernels
        # showed it (bench/refresh_packs.py), the one-core figure kept beside it.
        assert device.get(PROBE_KEY, 1) >= 2 or "peak_gflops_one_core" in device, (header["fingerprint"], device)
