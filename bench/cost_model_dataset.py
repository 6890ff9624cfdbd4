"""Grow the cross-hardware cost model's dataset on this box, then leave one fingerprint out.

Each hardware view of the box is a fingerprint and target of its own, as if it were another box:

- native: the box as it is (its cores, its ISA: AVX-512 on the Xeon this was written on; a shipped
  pack may hold this fingerprint's records already: they merge);
- native-1core: `taskset -c 0` (the fingerprint's cores and the target's num-cores are 1;
  TVM_NUM_THREADS=1 so the runtime's pool does not put two threads on the core);
- haswell, haswell-1core: FARM_CPU_VIEW_MCPU=haswell, AVX2 code (foundation.hardware.fingerprint:
  the fingerprint keeps only the ISA features LLVM gives a Haswell, the target's mcpu is haswell;
  OPENBLAS_CORETYPE=Haswell holds the device probe's matmul to AVX2 kernels too), whole box and
  one core;
- sandybridge, sandybridge-1core: AVX code without FMA (256-bit vectors, a multiply and an add for
  each FMA); nehalem, nehalem-1core: SSE4.2 code (128-bit vectors, no FMA): the vector widths and
  FMA the device features read, which the AVX-512 boxes of the shipped packs all share.

For each view and model, one `farm submit MODEL llvm 1 --cold --retune --reuse off` into one
registry (a new registry per view would not grow): its records are the view's own, measured here.
Run again with another --seed to grow the dataset. Each view's records (no libraries) are kept as a
pack in --keep (bench/dataset/, one per view's fingerprint, its header naming the view, CPU, commands
and dates; a pack there is added to, never rewritten), so the dataset grows from session to session
and box to box. Then bench/cost_model_transfer.py on that registry, the kept packs and the packs
tvm-farm ships (their records count: another fingerprint) writes the leave-one-out evaluation
(JSON). The records are timings: say in --conditions whether the box was quiet (the default text
says it was not).

    .venv/bin/python bench/cost_model_dataset.py [--home DIR] [--views native,native-1core,haswell,haswell-1core]
        [--models resnet-18,mobilenet] [--trials-per-task 8] [--seed 0] [--skip-tuning] [--keep bench/dataset]
        [--per-fingerprint 1500] [--conditions TEXT] [--out docs/results/cost-model-transfer.json]

Exit codes: 0 done; 2 bad arguments; 3 fewer than two fingerprints with records; else a submit's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

FARM = str(Path(sys.executable).with_name("farm"))
BUSY = ("recorded on a shared 2-core VM beside other work (tests and tuning of other engineers): times are "
        "slower and noisier than quiet ones; labels are normalised per (workload, fingerprint), so a view that "
        "ran slower throughout ranks on equal terms, but a burst during some records reorders them")


@dataclass(frozen=True)
class View:
    """A way to run this box as other hardware: the CPUs it may use, the CPU LLVM compiles for."""

    cpus: str | None = None  # taskset's list; None: every CPU
    mcpu: str | None = None  # FARM_CPU_VIEW_MCPU; None: the box's own

    def command(self, argv: list[str]) -> list[str]:
        return (["taskset", "-c", self.cpus] if self.cpus else []) + argv

    def environment(self, home: Path) -> dict[str, str]:
        env = {**os.environ, "FARM_HOME": str(home), "FARM_SHIPPED_PACKS": "0"}
        for name in ("FARM_REGISTRY", "FARM_CPU_VIEW_MCPU", "OPENBLAS_CORETYPE", "TVM_NUM_THREADS"):
            env.pop(name, None)
        if self.mcpu:
            env["FARM_CPU_VIEW_MCPU"] = self.mcpu
            if self.mcpu in OPENBLAS_CORES:
                env["OPENBLAS_CORETYPE"] = OPENBLAS_CORES[self.mcpu]
        if self.cpus:
            env["TVM_NUM_THREADS"] = str(len(self.cpus.split(",")))
        return env


# The device probe's matmul (numpy's OpenBLAS) held to the kernels of the CPU a view compiles for.
OPENBLAS_CORES = {"haswell": "Haswell", "sandybridge": "Sandybridge", "nehalem": "Nehalem"}

VIEWS = {
    "native": View(),
    "native-1core": View(cpus="0"),
    **{name: View(mcpu=name) for name in OPENBLAS_CORES},
    **{f"{name}-1core": View(cpus="0", mcpu=name) for name in OPENBLAS_CORES},
}
DEFAULT_VIEWS = ("native", "native-1core", "haswell", "haswell-1core")


def submit(view: View, home: Path, registry: str, model: str, trials_per_task: int, seed: int) -> dict:
    """One cold submit of ``model`` under ``view`` into ``registry``: what it did, as JSON."""
    argv = [FARM, "submit", model, "llvm", "1", "--trials-per-task", str(trials_per_task), "--cold", "--retune",
            "--reuse", "off", "--runs", "3", "--seed", str(seed), "--registry", registry, "--json"]
    began = time.monotonic()
    done = subprocess.run(view.command(argv), env=view.environment(home), capture_output=True, text=True)
    out = {"command": " ".join(view.command(["farm", *argv[1:]])), "rc": done.returncode,
           "seconds": round(time.monotonic() - began, 1)}
    try:
        job = json.loads(done.stdout)
    except ValueError:
        out["error"] = (done.stderr or done.stdout).strip()[-2000:]
        return out
    out.update({"trials": job.get("trials"), "fingerprint": job.get("fingerprint"), "state": job.get("state")})
    return out


def keep_views(registry: str, log: list[dict], folder: Path) -> None:
    """Each view's records in ``registry`` added to its pack in ``folder`` (made if none): the views of
    fingerprints a shipped pack holds (the box as it is) are left to that pack."""
    from timing import cpu_model

    from foundation.clock import utc_now
    from foundation.registry.packs import in_memory_registry, read_pack, write_pack
    from foundation.registry.shipped_packs import shipped_packs
    from foundation.registry.store import RegistryStore
    from foundation.registry.sync import SyncFilter, sync_registries

    shipped = {path.stem for path in shipped_packs()}
    views = {d["fingerprint"]: d["view"] for d in log if d.get("fingerprint") and d.get("rc") == 0}
    folder.mkdir(parents=True, exist_ok=True)
    store = RegistryStore(registry, create=False)
    try:
        for fingerprint, view in sorted(views.items()):
            if fingerprint in shipped:
                continue
            path = folder / f"{fingerprint}.farmpack"
            pack, before = read_pack(path) if path.exists() else (in_memory_registry(), {})
            sync_registries(store, pack, SyncFilter(fingerprint=fingerprint, artifacts=False))
            commands = sorted({*before.get("tuned_with", []),
                               *(d["command"] for d in log if d.get("fingerprint") == fingerprint)})
            cpus = sorted({*before.get("cpus", []), cpu_model()})
            dates = sorted({*before.get("dates", []), utc_now().date().isoformat()})
            header = write_pack(pack, path, {"view": view, "fingerprint": fingerprint, "cpus": cpus, "dates": dates,
                                             "tuned_with": commands,
                                             "command": " ".join(["python", *sys.argv])})
            pack.dispose()
            print(f"kept {path.name} ({view}): {header['tables']['tuning_records']['rows']} records",
                  file=sys.stderr, flush=True)
    finally:
        store.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=Path.home() / ".local" / "share" / "tvm-farm-dataset",
                        help="the dataset's farm home: its registry (dataset.db) grows with every run")
    parser.add_argument("--views", default=",".join(DEFAULT_VIEWS), help=f"some of {', '.join(VIEWS)}")
    parser.add_argument("--models", default="resnet-18,mobilenet")
    parser.add_argument("--trials-per-task", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="the submits' search seed: another one grows the dataset")
    parser.add_argument("--skip-tuning", action="store_true", help="evaluate the registry as it is")
    parser.add_argument("--per-fingerprint", type=int, default=1500,
                        help="the evaluation's records of each fingerprint, its newest (the packs hold more)")
    parser.add_argument("--conditions", default=BUSY)
    parser.add_argument("--keep", type=Path, default=ROOT / "bench" / "dataset",
                        help="where each view's records are kept as a pack, and read back for the evaluation")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "cost-model-transfer.json")
    args = parser.parse_args(argv)
    views = [v.strip() for v in args.views.split(",") if v.strip()]
    unknown = [v for v in views if v not in VIEWS]
    if unknown or not views:
        print(f"error: unknown view(s) {', '.join(unknown) or '(none)'}: use some of {', '.join(VIEWS)}",
              file=sys.stderr)
        return 2
    if args.trials_per_task < 1:
        print(f"error: --trials-per-task takes 1 or more, not {args.trials_per_task}", file=sys.stderr)
        return 2
    if any(VIEWS[v].cpus for v in views) and shutil.which("taskset") is None:
        print("error: the one-core views need taskset (util-linux): install it, or leave them out of --views",
              file=sys.stderr)
        return 2
    args.home.mkdir(parents=True, exist_ok=True)
    registry = f"sqlite:///{args.home / 'dataset.db'}"
    log_path = args.home / "submits.json"
    log = json.loads(log_path.read_text()) if log_path.exists() else []
    if not args.skip_tuning:
        for model in [m.strip() for m in args.models.split(",") if m.strip()]:
            for name in views:
                print(f"{name}: {model}, {args.trials_per_task} trials a task, seed {args.seed} ...", file=sys.stderr,
                      flush=True)
                done = {"view": name, "model": model, "seed": args.seed,
                        **submit(VIEWS[name], args.home, registry, model, args.trials_per_task, args.seed)}
                log.append(done)
                log_path.write_text(json.dumps(log, indent=1))
                print(f"  {done.get('state') or 'failed'}: {done.get('trials')} trials in {done['seconds']:.0f} s "
                      f"({done.get('fingerprint')})", file=sys.stderr, flush=True)
                if done["rc"] != 0:
                    print(done.get("error", ""), file=sys.stderr)
                    return done["rc"]
        keep_views(registry, log, args.keep)
    import cost_model_transfer

    views_seen = sorted({(d["view"], d.get("fingerprint")) for d in log if d.get("fingerprint")})
    conditions = (f"{args.conditions}. Views (fingerprint): "
                  + "; ".join(f"{v} ({fp})" for v, fp in views_seen)
                  + f". {sum(d.get('trials') or 0 for d in log)} trials in {len(log)} submits "
                    f"(bench/cost_model_dataset.py; log in the dataset home's submits.json).")
    return cost_model_transfer.main([registry, "--shipped", "--packs", str(args.keep), "--per-fingerprint",
                                     str(args.per_fingerprint), "--conditions", conditions, "--out", str(args.out)])


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    sys.exit(main())
