"""A fingerprint's measured device features are kept as first stored: boxes of one fingerprint
measure them a little apart, and no registration rewrites the row for that."""

from __future__ import annotations


def test_the_first_measured_device_features_stay(store):
    details = {"cores": 2, "model": "AMD EPYC"}
    first = store.upsert_fingerprint("cpu-aaaa", "cpu", "a cpu", {**details, "device": {"peak_gflops": 100.0}})
    again = store.upsert_fingerprint("cpu-aaaa", "cpu", "a cpu", {**details, "device": {"peak_gflops": 97.5}})
    assert again == first and again.details["device"] == {"peak_gflops": 100.0}
    # What is not measured still updates the row: a probe that learned a field.
    grown = store.upsert_fingerprint("cpu-aaaa", "cpu", "a cpu", {**details, "l3_kib": 32768, "device": {}})
    assert grown.details["l3_kib"] == 32768 and grown.details["device"] == {"peak_gflops": 100.0}
