"""Compatible fingerprints: the same hardware at another size, nearest size first."""

from __future__ import annotations

from foundation.domain.compatible_fingerprints import compatible, compatible_first, hardware_of

ZEN4 = {"arch": "x86_64", "vendor": "AuthenticAMD", "x86_family": 25, "x86_model": 17, "cores": 2,
        "l2_kib": 1024, "l3_kib": 32768, "features": ["avx2", "avx512f", "fma"], "model": "AMD EPYC 9R14",
        "llvm_mcpu": "znver4", "llvm_triple": "x86_64-pc-linux-gnu"}


def test_other_core_counts_and_cache_shares_are_compatible():
    assert compatible(ZEN4, {**ZEN4, "cores": 1})
    assert compatible(ZEN4, {**ZEN4, "cores": 96, "l3_kib": 393216})
    assert hardware_of({**ZEN4, "cores": 8}) == hardware_of(ZEN4)


def test_other_code_generation_or_cpu_model_is_not():
    assert not compatible(ZEN4, {**ZEN4, "features": ["avx2", "fma"]})
    assert not compatible(ZEN4, {**ZEN4, "llvm_mcpu": "znver3"})
    assert not compatible(ZEN4, {**ZEN4, "model": "AMD EPYC 9654"})
    assert not compatible(ZEN4, {**ZEN4, "l2_kib": 512})  # a core's own cache is part of the hardware


def test_cuda_devices_differ_only_by_memory():
    a100 = {"name": "A100", "compute_capability": "8.0", "sm_count": 108, "memory_gib": 80}
    assert compatible(a100, {**a100, "memory_gib": 40})
    assert not compatible(a100, {**a100, "sm_count": 14})  # a MIG slice is other hardware to a schedule


def test_nearest_size_first_more_cores_before_fewer_never_itself():
    others = {"me": ZEN4, "one": {**ZEN4, "cores": 1}, "three": {**ZEN4, "cores": 3},
              "sixteen": {**ZEN4, "cores": 16}, "zen3": {**ZEN4, "features": ["avx2", "fma"], "cores": 2}}
    assert compatible_first("me", ZEN4, others) == ["three", "one", "sixteen"]
