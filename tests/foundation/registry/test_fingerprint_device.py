"""A fingerprint's measured device features are kept as first stored: boxes of one fingerprint
measure them a little apart, and no registration rewrites the row for that; a measurement by
newer probes replaces them, and so does a quiet box's where the stored one was probed busy."""

from __future__ import annotations


def test_the_first_measured_device_features_stay(store):
    details = {"cores": 2, "model": "AMD EPYC"}
    first = store.upsert_fingerprint("cpu-aaaa", "cpu", "a cpu", {**details, "device": {"peak_gflops": 100.0}})
    again = store.upsert_fingerprint("cpu-aaaa", "cpu", "a cpu", {**details, "device": {"peak_gflops": 97.5}})
    assert again == first and again.details["device"] == {"peak_gflops": 100.0}
    # What is not measured still updates the row: a probe that learned a field.
    grown = store.upsert_fingerprint("cpu-aaaa", "cpu", "a cpu", {**details, "l3_kib": 32768, "device": {}})
    assert grown.details["l3_kib"] == 32768 and grown.details["device"] == {"peak_gflops": 100.0}


def test_device_features_of_newer_probes_replace_older_ones(store):
    details = {"cores": 2, "model": "AMD EPYC"}
    one_core = {"peak_gflops": 103.9}  # probe version 1 stored no version
    every_core = {"peak_gflops": 190.2, "probe_version": 2}
    store.upsert_fingerprint("cpu-bbbb", "cpu", "a cpu", {**details, "device": one_core})
    newer = store.upsert_fingerprint("cpu-bbbb", "cpu", "a cpu", {**details, "device": every_core})
    assert newer.details["device"] == every_core
    # An agent still on the older code does not take it back, and the first current one stays.
    assert store.upsert_fingerprint("cpu-bbbb", "cpu", "a cpu", {**details, "device": one_core}).details["device"] \
        == every_core
    again = store.upsert_fingerprint("cpu-bbbb", "cpu", "a cpu",
                                     {**details, "device": {"peak_gflops": 185.0, "probe_version": 2}})
    assert again.details["device"] == every_core


def test_a_quiet_probe_replaces_one_taken_on_a_busy_box(store):
    details = {"cores": 2, "model": "Intel Xeon"}

    def registered(device):  # type: ignore[no-untyped-def]
        return store.upsert_fingerprint("cpu-cccc", "cpu", "a cpu", {**details, "device": device}).details["device"]

    busy = {"peak_gflops": 125.8, "probe_version": 2, "probe_load": 1.4}
    assert registered(busy) == busy
    # Another busy box, or one that stored no load (an agent of older code), does not replace it.
    assert registered({"peak_gflops": 131.0, "probe_version": 2, "probe_load": 0.9}) == busy
    assert registered({"peak_gflops": 150.0, "probe_version": 2}) == busy
    quiet = {"peak_gflops": 145.0, "probe_version": 2, "probe_load": 0.05}
    assert registered(quiet) == quiet
    # From then on the first quiet one stays, and a busy one never takes it back.
    assert registered({**quiet, "peak_gflops": 139.0}) == quiet and registered(busy) == quiet
