"""Record a pack of this box kind: tune the zoo's main models here, from nothing, and write what the
registry learned as a .farmpack for foundation/registry/shipped/ (the packs a new registry loads).

Each model is submitted in a fresh farm home with the quick start's budget, cold (no pack, no
seeds: the records are this hardware's own); then the home's registry is synced into the pack.
With --from-packs a kind that has a pack deepens it: each home loads the shipped packs and the
model is tuned again (`--retune`) at --trials-per-task, its search seeded from what the farm knows;
the pack takes only this fingerprint's records, every one measured here, and the new library,
which serves the next hit (the newest validated one does).
The pack's header says who made it: this script's command line, the submits it ran, the CPU
and the date; a pack is never edited by hand. Run it on a quiet box: the records are timings.

    .venv/bin/python bench/record_pack.py [--models resnet-18,mobilenet,bert] [--trials-per-task 32]
        [--out foundation/registry/shipped/] [--no-artifacts] [--from-packs]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import cpu_model

ROOT = Path(__file__).resolve().parent.parent
FARM = str(Path(sys.executable).with_name("farm"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet-18,mobilenet,bert")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--out", type=Path, default=ROOT / "foundation" / "registry" / "shipped")
    parser.add_argument("--no-artifacts", action="store_true", help="records, jobs and cost models only")
    parser.add_argument("--homes", type=Path, help="keep each model's farm home here (default: a temporary one)")
    parser.add_argument("--from-packs", action="store_true",
                        help="tune again from the shipped packs (--retune) instead of cold: a deeper pack")
    args = parser.parse_args()

    from foundation.clock import utc_now
    from foundation.hardware.fingerprint import local_fingerprint
    from foundation.hardware.versions import tvm_version
    from foundation.registry.packs import in_memory_registry, read_pack, write_pack
    from foundation.registry.store import RegistryStore
    from foundation.registry.sync import SyncFilter, sync_registries

    fingerprint = local_fingerprint("llvm")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{fingerprint.id}.farmpack"
    # Recorded again, a pack keeps what it held and who tuned it, and adds to both.
    pack, before = read_pack(out) if out.exists() else (in_memory_registry(), {})
    submits, results = list(before.get("tuned_with", [])), list(before.get("results", []))
    with tempfile.TemporaryDirectory(prefix="record-pack-") as scratch:
        scratch = str(args.homes) if args.homes else scratch
        for model in [m.strip() for m in args.models.split(",") if m.strip()]:
            home = Path(scratch) / model
            command = [FARM, "submit", model, "llvm", str(args.batch), "--trials-per-task",
                       str(args.trials_per_task), "--retune" if args.from_packs else "--cold", "--json"]
            env = {**os.environ, "FARM_HOME": str(home)}
            env.pop("FARM_REGISTRY", None)
            env["FARM_SHIPPED_PACKS"] = "1" if args.from_packs else "0"
            print(f"tuning {model} (batch {args.batch}, {args.trials_per_task} trials a task) ...", file=sys.stderr,
                  flush=True)
            begin = time.monotonic()
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            seconds = time.monotonic() - begin
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return done.returncode
            job = json.loads(done.stdout)
            submits.append(" ".join(["farm", *command[1:]]))
            results.append({"model": model, "seconds": round(seconds, 1), "trials": job.get("trials"),
                            "latency_median_ms": (job.get("artifact") or {}).get("latency_ms", {}).get("median")})
            print(f"  {model}: {job.get('trials')} trials in {seconds:.0f} s", file=sys.stderr, flush=True)
            store = RegistryStore(f"sqlite:///{home / 'registry.db'}", create=False)
            try:
                sync_registries(store, pack, SyncFilter(fingerprint=fingerprint.id, artifacts=not args.no_artifacts))
                # A sync keeps the pack's fingerprint row as it was; registered again, its device
                # features measured by older probes give way to the submit's (device_features).
                measured = store.get_fingerprint(fingerprint.id)
                pack.upsert_fingerprint(measured.id, measured.kind, measured.summary, measured.details)
            finally:
                store.dispose()
    # What other scripts wrote into the header (pack_timing_context's choice, refresh_packs' entries) stays.
    kept = {key: value for key, value in before.items() if key not in ("format", "version", "tables")}
    header = write_pack(pack, out, kept | {
        "command": " ".join(["python", *sys.argv]), "tuned_with": submits, "cpu": cpu_model(),
        "fingerprint": fingerprint.id, "fingerprint_summary": fingerprint.summary, "created": utc_now().isoformat(),
        "tvm_version": tvm_version(), "results": results,
    })
    print(json.dumps({"pack": str(out), "bytes": out.stat().st_size, "results": results,
                      "tables": {k: v["rows"] for k, v in header["tables"].items()}}, indent=2))
    return 0


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    sys.exit(main())
