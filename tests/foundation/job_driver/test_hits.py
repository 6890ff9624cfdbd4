"""Where a library may be found: this fingerprint first, then the same hardware at other sizes."""

from __future__ import annotations

import pytest

from foundation.errors import BadInput, NotFound
from foundation.hardware.targets import target_json
from foundation.job_driver.hits import LibraryScope, library_scopes

ZEN4 = {"arch": "x86_64", "vendor": "AuthenticAMD", "x86_family": 25, "cores": 2, "l3_kib": 32768,
        "features": ["avx2", "avx512f", "fma"], "model": "AMD EPYC 9R14", "llvm_mcpu": "znver4",
        "llvm_triple": "x86_64-pc-linux-gnu"}


def _target(cores: int, **extra) -> str:  # type: ignore[no-untyped-def]
    return target_json({"kind": "llvm", "mcpu": "znver4", "mtriple": "x86_64-pc-linux-gnu", "num-cores": cores,
                        **extra})


@pytest.fixture
def fleet(store):  # type: ignore[no-untyped-def]
    store.upsert_fingerprint("cpu-two", "cpu", "zen4 x2", ZEN4)
    store.upsert_fingerprint("cpu-one", "cpu", "zen4 x1", {**ZEN4, "cores": 1, "l3_kib": 16384})
    store.upsert_fingerprint("cpu-eight", "cpu", "zen4 x8", {**ZEN4, "cores": 8})
    store.upsert_fingerprint("cpu-zen3", "cpu", "zen3 x2", {**ZEN4, "features": ["avx2", "fma"], "llvm_mcpu": "znver3"})
    return store


def test_own_scope_first_then_compatible_ones_nearest_in_size_with_their_num_cores(fleet):
    scopes = library_scopes(fleet, _target(2), "cpu-two", ZEN4)
    assert scopes == [LibraryScope("cpu-two", _target(2)), LibraryScope("cpu-one", _target(1)),
                      LibraryScope("cpu-eight", _target(8))]


def test_a_num_cores_the_user_set_is_kept(fleet):
    scopes = library_scopes(fleet, _target(3), "cpu-two", ZEN4)
    assert [s.target_json for s in scopes] == [_target(3)] * 3


def test_a_named_fingerprint_is_the_only_scope_and_must_be_this_hardware(fleet):
    assert library_scopes(fleet, _target(2), "cpu-two", ZEN4, chosen="cpu-eight") == [
        LibraryScope("cpu-eight", _target(8))]
    assert library_scopes(fleet, _target(2), "cpu-two", ZEN4, chosen="cpu-two") == [
        LibraryScope("cpu-two", _target(2))]
    with pytest.raises(BadInput, match="other hardware"):
        library_scopes(fleet, _target(2), "cpu-two", ZEN4, chosen="cpu-zen3")
    with pytest.raises(NotFound, match="no fingerprint 'cpu-nope'"):
        library_scopes(fleet, _target(2), "cpu-two", ZEN4, chosen="cpu-nope")
