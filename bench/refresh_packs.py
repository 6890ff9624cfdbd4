"""Refresh what the shipped packs derive from their records: each box's peak where it was measured
on one core, and the cross cost model, trained in today's format on every pack's records.

A pack's records are timings of its box and are never touched here. What is derived from them is:

- the fingerprint's ``peak_gflops`` (foundation.hardware.device_features): packs recorded before
  probe version 2 hold what `farm submit` measured, with OPENBLAS_NUM_THREADS=1 (farm/cli/launch.py):
  one core's matmul. Such a peak is corrected only where the pack's own kernels show it is not the
  box's: the pack's three fastest tuned kernels (a workload's FLOPs over its best record's time, on
  every core of the box) each beat it by --kernel-margin or more. The corrected figure is the one-core
  figure times --core-scaling, what probe version 2 reads over what one core reads on a box whose
  cores are its own (`--measure-scaling` times both probes here: run it on a quiet box). The pack's
  fingerprint keeps the one-core figure beside it (``peak_gflops_one_core``) and no probe version:
  a box of that fingerprint replaces it with its own measurement in its registry.
- the device features of the pack of this box's own fingerprint, where this box's probes are newer
  than the pack's (foundation.domain.device_probes.PROBE_VERSION) and ran on a quiet box: a box
  re-probes its cached features when the probes change, and keeps its own over a pack's, so a cross
  model trained on a pack's older reading meets another figure for that kind than it learned
  (probe version 3 read KVM's EPYC model at 67 GFLOP/s where version 2 had read 19). Every other
  pack's features wait for a box of its kind to run this (``--no-probe`` leaves them all as they are).
- the hardware kind's cross cost model (foundation.meta_schedule.warm.cross_model, kind xgb-cross),
  trained on the records of every pack given, with their device features as corrected, and stored
  in each pack under its fingerprint (the same model in each: whichever pack a registry loads
  last, a job starts from a model of every pack's records, without training one first).

Each pack keeps its header (who recorded it, the CPU, the date) and gains an entry in ``refreshed``:
what changed, the evidence, this command and the date. Prints one JSON document.

    .venv/bin/python bench/refresh_packs.py [--packs foundation/registry/shipped] [--evidence-only]
        [--measure-scaling | --core-scaling 1.87] [--kernel-margin 1.3] [--seconds 600] [--no-probe]

Exit codes: 0 done; 2 bad arguments; 3 no pack, or too few samples to train a cross model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kernel_rates import fastest_kernels  # noqa: E402
from timing import cpu_model  # noqa: E402

# Kernels of a pack listed as evidence, the fastest in GFLOP/s first.
_KERNELS_SHOWN = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packs", type=Path, default=ROOT / "foundation" / "registry" / "shipped")
    parser.add_argument("--evidence-only", action="store_true", help="print the evidence, change nothing")
    scaling = parser.add_mutually_exclusive_group()
    scaling.add_argument("--core-scaling", type=float, help="probe version 2's figure over one core's")
    scaling.add_argument("--measure-scaling", action="store_true", help="time both probes on this box for it")
    parser.add_argument("--kernel-margin", type=float, default=1.3,
                        help="a peak is one core's where the pack's fastest kernel beats it by this")
    parser.add_argument("--seconds", type=float, default=None, help="bound the cross model's training")
    parser.add_argument("--no-probe", action="store_true",
                        help="leave the pack of this box's fingerprint with the device features it holds")
    args = parser.parse_args(argv)
    if args.kernel_margin <= 1.0 or (args.core_scaling is not None and args.core_scaling < 1.0):
        print("error: --kernel-margin must be above 1 and --core-scaling at least 1", file=sys.stderr)
        return 2

    from foundation.registry.packs import read_pack
    from foundation.registry.shipped_packs import shipped_packs

    paths = shipped_packs(args.packs)
    if not paths:
        print(f"error: no pack in {args.packs}", file=sys.stderr)
        return 3
    from foundation.hardware.fingerprint import cpu_fingerprint

    # This box probed now (not the cache's features), before the packs are read: reading them is a few
    # seconds of work the probe's load would see.
    own = None if args.no_probe or args.evidence_only else cpu_fingerprint()
    packs = [(path, *read_pack(path)) for path in paths]
    try:
        evidence = {path.name: pack_evidence(store) for path, store, _header in packs}
        scaling = measured_scaling() if args.measure_scaling else None
        core_scaling = scaling["scaling"] if scaling else args.core_scaling
        if args.evidence_only:
            print(json.dumps({"cpu": cpu_model(), "packs": evidence, "scaling": scaling}, indent=1))
            return 0
        corrections = {}
        for path, store, _header in packs:
            own_kind = own_device(store, evidence[path.name], own)
            corrections[path.name] = (own_kind if own_kind["changed"] else
                                      correct_peak(store, evidence[path.name], core_scaling, args.kernel_margin))
        trained = train_cross_model([store for _path, store, _header in packs], args.seconds)
        if trained is None:
            print("error: too few samples in the packs to train a cross cost model", file=sys.stderr)
            return 3
        out = {"cpu": cpu_model(), "scaling": scaling, "core_scaling": core_scaling, "packs": {}}
        for path, store, header in packs:
            refreshed = write_refreshed(path, store, header, trained, corrections[path.name], evidence[path.name],
                                        core_scaling, scaling)
            out["packs"][path.name] = refreshed
        print(json.dumps(out, indent=1))
        return 0
    finally:
        for _path, store, _header in packs:
            store.dispose()


def pack_evidence(store) -> dict[str, Any]:
    """The pack's fingerprint, its stored device features, and its fastest tuned kernels in
    GFLOP/s (TVM's FLOP count of the workload over its best record's time)."""
    [fingerprint] = [f for f in store.list_fingerprints() if f.kind == "cpu"]
    device = dict(fingerprint.details.get("device") or {})
    return {"fingerprint": fingerprint.id, "summary": fingerprint.summary, "device": device,
            "records": store.records.count_records(fingerprint_id=fingerprint.id),
            "fastest_kernels": fastest_kernels(store, fingerprint.id)[:_KERNELS_SHOWN]}


def measured_scaling() -> dict[str, Any]:
    """This box's peak probe (version 2, every core) over the same probe on one thread (what
    version 1 read in a farm process), best of three each, interleaved."""
    import os

    from foundation.hardware.device_features import matmul_gflops

    cores = len(os.sched_getaffinity(0))
    every, one = [], []
    for _ in range(3):
        every.append(matmul_gflops(cores))
        one.append(matmul_gflops(1))
    return {"cores": cores, "every_core_gflops": round(max(every), 1), "one_core_gflops": round(max(one), 1),
            "scaling": round(max(every) / max(one), 3), "cpu": cpu_model()}


def own_device(store, evidence: dict[str, Any], own) -> dict[str, Any]:
    """The pack's device features replaced by ``own``'s (this box's fingerprint, freshly probed)
    where the pack is of this box's fingerprint, ``own`` probed on a quiet box, and the registry's
    own rule prefers its measurement (RegistryStore.upsert_fingerprint: newer probes); what was
    done and why."""
    from foundation.domain.device_probes import PROBE_LOAD_KEY, probe_version, probed_quiet
    from foundation.hardware.device_features import DEVICE_KEY

    stored = evidence["device"]
    kept = {"peak_gflops": stored.get("peak_gflops"), "changed": False}
    if own is None:
        return {**kept, "why": "--no-probe"}
    if own.id != evidence["fingerprint"]:
        return {**kept, "why": f"not this box's fingerprint ({own.id})"}
    measured = dict(own.details.get(DEVICE_KEY) or {})
    if not probed_quiet(measured):
        return {**kept, "why": f"this box was busy as it probed (load {measured.get(PROBE_LOAD_KEY)} a core): "
                               "run again on a quiet box"}
    pack = store.get_fingerprint(evidence["fingerprint"])
    kept_now = store.upsert_fingerprint(pack.id, pack.kind, pack.summary, {**pack.details, DEVICE_KEY: measured})
    if kept_now.details[DEVICE_KEY] == stored:
        return {**kept, "why": f"this box's probes (version {probe_version(measured)}) are not newer than the "
                               f"pack's (version {probe_version(stored)})"}
    return {"peak_gflops": measured.get("peak_gflops"), "was": stored.get("peak_gflops"), "changed": True,
            "device": measured, "device_was": stored,
            "why": f"this box is of the pack's fingerprint and probed it quiet with probe version "
                   f"{probe_version(measured)}, newer than the pack's {probe_version(stored)}"}


def correct_peak(store, evidence: dict[str, Any], core_scaling: float | None, margin: float) -> dict[str, Any]:
    """The pack's peak corrected where its kernels show it was one core's (see the module's
    docstring); what was done and why."""
    from sqlalchemy import update

    from foundation.domain.device_probes import PROBE_KEY
    from foundation.registry.schema import FingerprintRow
    from foundation.registry.session import Changes

    device = evidence["device"]
    peak = device.get("peak_gflops")
    # The slowest of the few fastest kernels: one kernel's timing (a tiny one, a lucky run) proves little.
    fastest = evidence["fastest_kernels"][-1]["gflops"] if evidence["fastest_kernels"] else None
    if "peak_gflops_one_core" in device:
        return {"peak_gflops": peak, "changed": False, "why": "corrected before (peak_gflops_one_core is stored)"}
    if device.get(PROBE_KEY, 1) >= 2:
        return {"peak_gflops": peak, "changed": False,
                "why": f"measured by probe version {device[PROBE_KEY]} (every core)"}
    if peak is None or fastest is None or fastest < margin * peak:
        return {"peak_gflops": peak, "changed": False,
                "why": f"the pack's {_KERNELS_SHOWN} fastest kernels (down to {fastest} GFLOP/s) do not all beat the "
                       f"stored peak by {margin}x: no evidence that it is one core's"}
    if core_scaling is None:
        return {"peak_gflops": peak, "changed": False,
                "why": "one core's by its kernels, but no --core-scaling or --measure-scaling given"}
    corrected = round(peak * core_scaling, 2)
    fingerprint = evidence["fingerprint"]
    details = store.get_fingerprint(fingerprint).details
    details = {**details, "device": {**details["device"], "peak_gflops": corrected, "peak_gflops_one_core": peak}}
    with store.unit_of_work.write(Changes.STATE) as session:
        session.execute(update(FingerprintRow).where(FingerprintRow.id == fingerprint).values(details=details))
    return {"peak_gflops": corrected, "was": peak, "changed": True,
            "why": f"the pack's {_KERNELS_SHOWN} fastest kernels read {fastest} GFLOP/s or more on the box's cores, "
                   f"{fastest / peak:.2f}x the stored peak or more: the probe ran on one core (probe version 1 in "
                   f"`farm submit`, OPENBLAS_NUM_THREADS=1); scaled by {core_scaling}, probe version 2 over one "
                   f"core's on a box whose cores are its own"}


def train_cross_model(stores, seconds: float | None):
    """The cross model trained on every pack's records (each fingerprint's device features as
    its pack now holds them), with what it learned; None with too few samples."""
    import time

    from foundation.hardware.versions import tvm_version
    from foundation.meta_schedule.warm.cross_model import MIN_SAMPLES, PER_FINGERPRINT, model_bytes, train
    from foundation.meta_schedule.warm.cross_samples import registry_dataset

    begin = time.monotonic()
    dataset = registry_dataset(stores, tvm_version(), "cpu", per_fingerprint=PER_FINGERPRINT)
    if len(dataset.samples) < MIN_SAMPLES:
        return None
    sampled = time.monotonic() - begin
    model = train(dataset.samples, dataset.vectors, seconds=seconds)
    return {"blob": model_bytes(model), "samples": len(dataset.samples),
            "workloads": len({s.group for s in dataset.samples}), "fingerprints": sorted(dataset.vectors),
            "trees": model.booster.num_boosted_rounds(), "sample_s": round(sampled, 1),
            "train_s": round(time.monotonic() - begin - sampled, 1), "tvm_version": tvm_version()}


def write_refreshed(path: Path, store, header: dict[str, Any], trained: dict[str, Any], correction: dict[str, Any],
                    evidence: dict[str, Any], core_scaling: float | None, scaling: dict | None) -> dict[str, Any]:
    """Store the cross model in the pack under its fingerprint and write the pack again, its
    header kept and a ``refreshed`` entry added; that entry."""
    import hashlib

    from sqlalchemy import func, select

    from foundation.clock import utc_now
    from foundation.meta_schedule.warm.cross_model import KIND
    from foundation.registry.packs import header_about, write_pack
    from foundation.registry.schema import TuningRecordRow

    fingerprint = evidence["fingerprint"]
    with store.unit_of_work.read() as session:
        last = session.scalar(select(func.max(TuningRecordRow.id)).where(
            TuningRecordRow.fingerprint_id == fingerprint, TuningRecordRow.tvm_version == trained["tvm_version"])) or 0
    store.cost_models.save(fingerprint, trained["tvm_version"], KIND, trained["blob"], last_record_id=last,
                           samples=trained["samples"], workloads=trained["workloads"])
    entry = {
        "date": utc_now().isoformat(),
        "command": " ".join(["python", *sys.argv]),
        "cpu": cpu_model(),
        "peak_gflops": correction,
        "fastest_kernels": evidence["fastest_kernels"],
        "core_scaling": core_scaling,
        "scaling_measured": scaling,
        "cross_cost_model": {"kind": KIND, "sha256": hashlib.sha256(trained["blob"]).hexdigest(),
                             **{k: trained[k] for k in ("samples", "workloads", "fingerprints", "trees", "sample_s",
                                                        "train_s", "tvm_version")}},
    }
    about = header_about(header)
    about["refreshed"] = [*header.get("refreshed", []), entry]
    write_pack(store, path, about)
    return entry


if __name__ == "__main__":
    sys.exit(main())
