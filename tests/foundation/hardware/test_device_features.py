"""Device features: measured on this box, stored with the fingerprint, never part of its id."""

from __future__ import annotations

import json
import math

from foundation.domain.compatible_fingerprints import compatible
from foundation.domain.device_probes import PROBE_KEY, PROBE_LOAD_KEY, PROBE_VERSION
from foundation.domain.fingerprint_nearness import SAME_FINGERPRINT, nearness_tier
from foundation.hardware.device_features import DEVICE_KEY, VECTOR_FIELDS, cpu_device_features, device_vector
from foundation.hardware.fingerprint import cached_cpu_fingerprint, fingerprint_from_details

CPU = {"arch": "x86_64", "vendor": "GenuineIntel", "model": "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
       "features": ["avx", "avx2", "avx512f", "fma", "sse4_2"], "cores": 2, "llvm_mcpu": "cascadelake",
       "llvm_triple": "x86_64-unknown-linux-gnu", "l2_kib": 1024, "l3_kib": 28160}
CUDA = {"name": "Tesla T4", "compute_capability": "7.5", "sm_count": 40, "memory_gib": 15,
        "host_triple": "x86_64-unknown-linux-gnu"}


def test_the_device_key_changes_no_id_and_no_comparison():
    for kind, details in (("cpu", CPU), ("cuda", CUDA)):
        bare = fingerprint_from_details(kind, details)
        one = fingerprint_from_details(kind, {**details, DEVICE_KEY: {"peak_gflops": 100.5, "copy_gbps": 9.1}})
        other = fingerprint_from_details(kind, {**details, DEVICE_KEY: {"peak_gflops": 97.0, "copy_gbps": 8.7}})
        assert bare.id == one.id == other.id
        assert one.details[DEVICE_KEY] == {"copy_gbps": 9.1, "peak_gflops": 100.5}
        assert nearness_tier(one.details, other.details) == SAME_FINGERPRINT
        assert nearness_tier(bare.details, one.details) == SAME_FINGERPRINT
        assert compatible(one.details, other.details)
    # Still a different fingerprint when the hardware differs, whatever the measurements.
    wider = fingerprint_from_details("cpu", {**CPU, "cores": 4, DEVICE_KEY: {"peak_gflops": 100.5}})
    assert wider.id != fingerprint_from_details("cpu", CPU).id
    assert nearness_tier(CPU, wider.details) != SAME_FINGERPRINT


def test_this_box_has_sane_device_features():
    from foundation.hardware.fingerprint import _cheap_cpu_details

    cheap = _cheap_cpu_details()
    device = cpu_device_features(cheap)
    assert device["cores"] == cheap["cores"] >= 1
    assert math.isfinite(device["peak_gflops"]) and device["peak_gflops"] > 0
    assert math.isfinite(device["copy_gbps"]) and device["copy_gbps"] > 0
    assert device["vector_bits"] >= 64 and device["fma"] in (0, 1)
    for cache in ("l1d_kib", "l2_kib", "l3_kib"):
        assert device.get(cache, 1) > 0
    if "avx2" in cheap["features"]:
        assert device["vector_bits"] >= 256 and device["fma"] == 1
    json.dumps(device, allow_nan=False)  # the registry's JSON holds no NaN


def test_the_cached_fingerprint_carries_them_measured_once(tmp_path, monkeypatch):
    import foundation.hardware.device_features as device_features
    import foundation.hardware.fingerprint as fingerprint_module

    for module in (device_features, fingerprint_module):  # a quiet box (a busy one's probe is taken again)
        monkeypatch.setattr(module, "load_per_core", lambda: 0.05)
    monkeypatch.setattr(fingerprint_module, "_MEASURED_DEVICES", {})  # probed in this test, not by one before
    first = cached_cpu_fingerprint(tmp_path)
    assert first.details[DEVICE_KEY][PROBE_LOAD_KEY] == 0.05
    assert first.details[DEVICE_KEY]["peak_gflops"] > 0
    vector = device_vector(first.details)
    assert len(vector) == len(VECTOR_FIELDS) and vector[VECTOR_FIELDS.index("peak_gflops")] > 0
    assert math.isnan(vector[VECTOR_FIELDS.index("sm_count")])  # a CPU has no SMs: missing, not zero

    def no_probe(_details):
        raise AssertionError("probed again although the fingerprint is cached")

    monkeypatch.setattr(fingerprint_module, "cpu_device_features", no_probe)
    monkeypatch.setattr(fingerprint_module, "_MEASURED_DEVICES", {})  # as a new process: only the file
    again = cached_cpu_fingerprint(tmp_path)
    assert again == first


def test_a_cached_fingerprint_of_older_probes_is_measured_again_under_its_id(tmp_path, monkeypatch):
    import foundation.hardware.fingerprint as fingerprint_module

    first = cached_cpu_fingerprint(tmp_path)
    assert first.details[DEVICE_KEY][PROBE_KEY] == PROBE_VERSION
    (cache_file,) = tmp_path.glob("cpu-fingerprint-*.json")
    stored = json.loads(cache_file.read_text())
    # As probe version 1 left it: no version, one core's peak.
    stored[DEVICE_KEY] = {**{k: v for k, v in stored[DEVICE_KEY].items() if k != PROBE_KEY}, "peak_gflops": 1.5}
    cache_file.write_text(json.dumps(stored))
    monkeypatch.setattr(fingerprint_module, "_MEASURED_DEVICES", {})  # as a new process: only the file

    again = cached_cpu_fingerprint(tmp_path)
    assert again.id == first.id
    assert again.details[DEVICE_KEY][PROBE_KEY] == PROBE_VERSION and again.details[DEVICE_KEY]["peak_gflops"] != 1.5
    assert json.loads(cache_file.read_text())[DEVICE_KEY] == again.details[DEVICE_KEY]


def test_a_cached_fingerprint_probed_on_a_busy_box_is_measured_again_once_the_box_is_quiet(tmp_path, monkeypatch):
    import foundation.hardware.device_features as device_features
    import foundation.hardware.fingerprint as fingerprint_module

    load = [1.4]  # runnable processes a core: `pip install` beside the first probe
    for module in (device_features, fingerprint_module):
        monkeypatch.setattr(module, "load_per_core", lambda: load[0])
    monkeypatch.setattr(fingerprint_module, "_MEASURED_DEVICES", {})
    busy = cached_cpu_fingerprint(tmp_path)
    assert busy.details[DEVICE_KEY][PROBE_LOAD_KEY] == 1.4
    probes = []
    real_probe = fingerprint_module.cpu_device_features
    monkeypatch.setattr(fingerprint_module, "cpu_device_features", lambda d: probes.append(1) or real_probe(d))
    monkeypatch.setattr(fingerprint_module, "_MEASURED_DEVICES", {})  # as a new process: only the file
    assert cached_cpu_fingerprint(tmp_path) == busy and probes == []  # still busy: nothing better to be had

    load[0] = 0.1
    monkeypatch.setattr(fingerprint_module, "_MEASURED_DEVICES", {})
    quiet = cached_cpu_fingerprint(tmp_path)
    assert probes == [1] and quiet.id == busy.id and quiet.details[DEVICE_KEY][PROBE_LOAD_KEY] == 0.1
    monkeypatch.setattr(fingerprint_module, "_MEASURED_DEVICES", {})
    assert cached_cpu_fingerprint(tmp_path) == quiet and probes == [1]  # kept from then on


def test_a_peak_read_as_if_other_work_held_a_core_is_probed_again_and_the_best_kept(monkeypatch):
    """Work beside the probe for longer than its rounds lowers all of them (another job's workers
    ending): the probe is taken again after a pause while every core reads under the floor of one
    core's times the cores. The readings are scripted: a burst on cue is what a test cannot make."""
    import foundation.hardware.device_features as device_features

    def scripted(readings: dict[int, list[float]]):
        def probe(cores: int) -> float:
            return readings[cores].pop(0)
        return probe

    monkeypatch.setattr(device_features, "_PEAK_PAUSE_S", 0.0)
    # Two cores read one core's worth beside a burst, then the box's own once it ended.
    monkeypatch.setattr(device_features, "matmul_gflops", scripted({2: [111.0, 205.0], 1: [108.0]}))
    assert device_features.box_peak_gflops(2) == 205.0
    # A box whose cores share their vector units reads low every time: retried, its best kept.
    monkeypatch.setattr(device_features, "matmul_gflops", scripted({2: [120.0, 118.0, 121.0], 1: [110.0]}))
    assert device_features.box_peak_gflops(2) == 121.0
    # A reading that scales is kept at once; one core is never compared.
    monkeypatch.setattr(device_features, "matmul_gflops", scripted({2: [200.0], 1: [108.0]}))
    assert device_features.box_peak_gflops(2) == 200.0
    monkeypatch.setattr(device_features, "matmul_gflops", scripted({1: [104.0]}))
    assert device_features.box_peak_gflops(1) == 104.0
