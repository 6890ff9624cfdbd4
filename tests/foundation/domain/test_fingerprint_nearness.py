"""Which other fingerprint's records are tried first as seeds: same features, then same family."""

from __future__ import annotations

from foundation.domain.fingerprint_nearness import (
    COMPATIBLE,
    OTHER,
    SAME_ARCH,
    SAME_FAMILY,
    SAME_FEATURES,
    SAME_FINGERPRINT,
    nearest_first,
    nearness_tier,
)

ZEN4 = {"arch": "x86_64", "vendor": "AuthenticAMD", "x86_family": 25, "cores": 2,
        "features": ["avx2", "avx512f", "fma"], "model": "AMD EPYC 9R14"}
ZEN4_8 = {**ZEN4, "cores": 8}  # the same CPU with more cores: another fingerprint, compatible
ZEN4_OTHER_MODEL = {**ZEN4, "model": "AMD EPYC 9654"}  # the same features on another CPU model
ZEN3 = {**ZEN4, "features": ["avx2", "fma"], "model": "AMD EPYC 7R13"}
ZEN1 = {**ZEN4, "x86_family": 23, "features": ["avx2", "fma"], "model": "AMD EPYC 7571"}
XEON = {"arch": "x86_64", "vendor": "GenuineIntel", "x86_family": 6, "features": ["avx2", "fma", "avx512f", "amx"]}
GRAVITON = {"arch": "aarch64", "vendor": "ARM", "features": ["neon", "sve"]}


def test_tiers_go_from_compatible_to_same_features_to_same_family_to_same_arch():
    assert nearness_tier(ZEN4, dict(ZEN4)) == SAME_FINGERPRINT
    assert nearness_tier(ZEN4, ZEN4_8) == COMPATIBLE
    assert nearness_tier(ZEN4, ZEN4_OTHER_MODEL) == SAME_FEATURES
    assert nearness_tier(ZEN4, ZEN3) == SAME_FAMILY
    assert nearness_tier(ZEN4, XEON) == SAME_ARCH
    assert nearness_tier(ZEN4, GRAVITON) == OTHER


def test_cuda_devices_rank_by_compute_capability():
    a100 = {"name": "A100", "compute_capability": "8.0", "sm_count": 108}
    a10 = {"name": "A10", "compute_capability": "8.6", "sm_count": 72}
    a100_40 = {**a100, "memory_gib": 40}
    t4 = {"name": "T4", "compute_capability": "7.5", "sm_count": 40}
    a100_sxm = {**a100, "name": "A100-SXM4"}
    assert nearness_tier(a100, a100_40) == COMPATIBLE
    assert nearness_tier(a100, a100_sxm) == SAME_FEATURES
    assert nearness_tier(a100, a10) == SAME_FAMILY
    assert nearness_tier(a100, t4) == SAME_ARCH


def test_this_fingerprint_first_then_nearest_and_ties_by_shared_features():
    others = {"zen1": ZEN1, "xeon": XEON, "me": ZEN4, "zen4-8": ZEN4_8, "graviton": GRAVITON, "zen3": ZEN3,
              "zen4-other": ZEN4_OTHER_MODEL}
    # zen3 and zen1 share a vendor, but only zen3 shares the family; XEON shares avx512f with
    # this box, which does not lift it above the AMD family.
    assert nearest_first("me", ZEN4, others) == ["me", "zen4-8", "zen4-other", "zen3", "xeon", "zen1", "graviton"]
