"""Leave one fingerprint out: how well cost models trained on other hardware rank a box's records.

Builds the dataset from a registry (and, with --shipped, the packs tvm-farm ships; with --packs, those
in a folder): every record of every fingerprint of one hardware kind, as MetaSchedule's program
features with its fingerprint's device features (foundation.meta_schedule.warm.cross_samples). Then, for each
fingerprint in turn, ranks its records workload by workload with:

- untrained: an untrained XGBModel predicts at random; its expected scores are shown
  (pairwise 0.5, top-k recall k/n);
- cross, no device: trained on the other fingerprints' records, program features only;
- cross + device: the same with each fingerprint's device features as they are, one constant
  per box on every row (cross_model.DEVICE_FIELDS): the farm's xgb-cross model;
- cross + derived device: the same with each row's program features read against its box's device
  instead (foundation.meta_schedule.warm.program_on_device: lanes and cores filled, reuse against
  each cache, intensity against the box's balance, a roofline time);
- own 7%: trained on a random 7% (--own-share) of the held-out fingerprint's own records (the
  per-fingerprint model a box has after a few of its own jobs);
- blend own 7%, fine-tuned on own 7%: the two ways a job carries its own measurements into the
  cross model (foundation.meta_schedule.warm.cross_cost_model: BLEND, FINE_TUNE), with those 7%.

All are scored on the same records: the held-out fingerprint's valid records less the ones the
own model trained on. Measures per workload: pairs put in the right order (pooled over the
workloads), top-1 and top-5 recall (the share of the k fastest among the k ranked first, the
mean over workloads). Labels are normalised per (workload, fingerprint) and only orders within
one workload of one fingerprint are scored, so a box that ran slower throughout (other work
beside it) still ranks on equal terms; a burst during some records, though, reorders them.
Prints the table and writes every row, per workload too, to --out (JSON).

    .venv/bin/python bench/cost_model_transfer.py REGISTRY_URL [--shipped] [--packs DIR] [--kind cpu]
        [--own-share 0.07] [--seed 0] [--per-fingerprint N] [--conditions TEXT]
        [--out docs/results/cost-model-transfer.json]

Exit codes: 0 done; 2 bad arguments; 3 fewer than two fingerprints with records.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ("untrained", "cross, no device", "cross + device", "cross + derived device", "own 7%",
          "cross + device, blend own 7%", "cross + device, fine-tuned on own 7%")
MEASURES = ("pairwise_accuracy", "top1_recall", "top5_recall")


def ranking(groups: Sequence[tuple[Sequence[float], Sequence[float]]]) -> dict:
    """Pairwise accuracy and top-1/top-5 recall over ``groups`` of (scores, seconds), one per
    workload; scores of None mean a random order (its expected value)."""
    right = pairs = 0.0
    recalls: dict[int, list[float]] = {1: [], 5: []}
    for scores, seconds in groups:
        n = len(seconds)
        order = sorted(range(n), key=seconds.__getitem__)
        for i in range(n):
            for j in range(i + 1, n):
                if seconds[i] == seconds[j]:
                    continue
                pairs += 1
                if scores is None:
                    right += 0.5
                else:
                    right += (scores[i] > scores[j]) == (seconds[i] < seconds[j])
        for k in recalls:
            k_here = min(k, n)
            if scores is None:
                recalls[k].append(k_here / n)
                continue
            ranked = sorted(range(n), key=lambda i: -scores[i])[:k_here]
            recalls[k].append(len(set(order[:k_here]) & set(ranked)) / k_here)
    mean = lambda values: sum(values) / len(values) if values else float("nan")  # noqa: E731
    return {"workloads": len(groups), "pairs": int(pairs),
            "pairwise_accuracy": right / pairs if pairs else float("nan"),
            "top1_recall": mean(recalls[1]), "top5_recall": mean(recalls[5])}


def leave_one_out(samples, vectors, held: str, own_share: float, seed: int) -> list[dict]:
    """Each model's row for fingerprint ``held`` (the pooled figures, and ``per_workload``)."""
    import numpy as np

    from foundation.meta_schedule.warm.cross_cost_model import blended
    from foundation.meta_schedule.warm.cross_model import fine_tuned, train
    from foundation.meta_schedule.warm.program_on_device import COLUMNS

    own = [s for s in samples if s.fingerprint_id == held]
    others = [s for s in samples if s.fingerprint_id != held]
    draw = np.random.default_rng(seed)
    picked = set(draw.choice(len(own), size=max(2, round(own_share * len(own))), replace=False).tolist()) \
        if len(own) >= 4 else set()
    own_train = [s for i, s in enumerate(own) if i in picked]
    scored = [s for i, s in enumerate(own) if i not in picked and not s.failed]
    by_workload: dict[int, list] = {}
    for s in scored:
        by_workload.setdefault(s.workload_id, []).append(s)
    groups = [g for g in by_workload.values() if len(g) >= 2]
    programs = [[s.program for s in g] for g in groups]
    vector = vectors[held]
    scores: dict[str, list | None] = {"untrained": None}
    train_sizes = {"untrained": 0}
    seconds: dict[str, float] = {"untrained": 0.0}

    def score(name: str, model, size: int, began: float) -> None:
        seconds[name] = time.monotonic() - began
        scores[name] = [model.predict(p, vector) for p in programs]
        train_sizes[name] = size

    if others:
        began = time.monotonic()
        score("cross, no device", train(others, None), len(others), began)
        began = time.monotonic()
        cross = train(others, vectors)
        score("cross + device", cross, len(others), began)
        began = time.monotonic()
        score("cross + derived device", train(others, vectors, device_fields=COLUMNS), len(others), began)
    if own_train:
        began = time.monotonic()
        own_model = train(own_train, None)
        score("own 7%", own_model, len(own_train), began)
    if others and own_train:
        scores["cross + device, blend own 7%"] = [
            blended(c, o, len(own_train)) for c, o in zip(scores["cross + device"], scores["own 7%"])]
        train_sizes["cross + device, blend own 7%"] = len(others) + len(own_train)
        seconds["cross + device, blend own 7%"] = seconds["cross + device"] + seconds["own 7%"]
        began = time.monotonic()
        score("cross + device, fine-tuned on own 7%", fine_tuned(cross, own_train, vectors),
              len(others) + len(own_train), began)
        seconds["cross + device, fine-tuned on own 7%"] += seconds["cross + device"]
    rows = []
    for name in MODELS:
        if name not in scores:
            continue
        by_group = scores[name]
        pairs = [(None if by_group is None else list(by_group[i]), [s.cost for s in g]) for i, g in enumerate(groups)]
        rows.append({"held_out": held, "model": name, "train_samples": train_sizes[name],
                     "train_predict_seconds": round(seconds[name], 3), "eval_records": sum(len(g) for g in groups),
                     **ranking(pairs),
                     "per_workload": [{"workload_id": g[0].workload_id, "records": len(g),
                                       **{k: v for k, v in ranking([pair]).items() if k in MEASURES}}
                                      for g, pair in zip(groups, pairs)]})
    return rows


def summary(rows: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Each model's measures, the mean over the held-out fingerprints."""
    out = {}
    for name in MODELS:
        mine = [r for r in rows if r["model"] == name]
        if mine:
            out[name] = {m: round(statistics.fmean(v for r in mine if not math.isnan(v := r[m])), 4)
                         for m in MEASURES}
            out[name]["held_out"] = len(mine)
    return out


def _no_nan(value):
    """``value`` with NaN (a workload with no pair of different times) as null: standard JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("registry")
    parser.add_argument("--shipped", action="store_true", help="add the records of the packs tvm-farm ships")
    parser.add_argument("--packs", type=Path, action="append", default=[], metavar="DIR",
                        help="add the records of every .farmpack in DIR (bench/dataset: the views kept by "
                             "bench/cost_model_dataset.py); repeatable")
    parser.add_argument("--kind", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--own-share", type=float, default=0.07)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-fingerprint", type=int, default=None,
                        help="at most this many of each fingerprint's newest records (default: every one)")
    parser.add_argument("--conditions", default="",
                        help="how the records were measured (a quiet box, or beside other work), kept in the JSON")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "cost-model-transfer.json")
    args = parser.parse_args(argv)
    if not 0 < args.own_share < 1:
        print(f"error: --own-share takes a share between 0 and 1, not {args.own_share}", file=sys.stderr)
        return 2
    if args.per_fingerprint is not None and args.per_fingerprint < 4:
        print(f"error: --per-fingerprint takes 4 or more, not {args.per_fingerprint}", file=sys.stderr)
        return 2

    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm" if args.kind == "cpu" else "cuda")
    import tvm
    from timing import cpu_model

    from foundation.clock import utc_now
    from foundation.meta_schedule.warm.cross_samples import registry_dataset
    from foundation.registry.packs import read_pack
    from foundation.registry.shipped_packs import shipped_packs
    from foundation.registry.store import RegistryStore

    stores = [RegistryStore(args.registry, create=False)]
    if args.shipped:
        stores += [read_pack(path)[0] for path in shipped_packs()]
    stores += [read_pack(path)[0] for folder in args.packs for path in sorted(folder.glob("*.farmpack"))]
    try:
        began = time.monotonic()
        dataset = registry_dataset(stores, tvm.__version__, args.kind, per_fingerprint=args.per_fingerprint)
        extract_s = time.monotonic() - began
        about = {f.id: {"summary": f.summary, "device": f.details.get("device") or {}}
                 for store in stores for f in store.list_fingerprints() if f.id in dataset.vectors}
    finally:
        for store in stores:
            store.dispose()
    fingerprints = sorted(dataset.vectors)
    if len(fingerprints) < 2:
        print(f"error: {len(fingerprints)} {args.kind} fingerprint(s) with records of TVM {tvm.__version__} "
              "(leaving one out needs at least two)", file=sys.stderr)
        return 3
    rows = []
    for held in fingerprints:
        rows += leave_one_out(dataset.samples, dataset.vectors, held, args.own_share, args.seed)
    print(f"{len(dataset.samples)} records of {len(fingerprints)} {args.kind} fingerprints, TVM {tvm.__version__}")
    print(f"{'held out':<20} {'model':<37} {'train':>6} {'scored':>6} {'pairwise':>8} {'top-1':>6} {'top-5':>6}")
    for row in rows:
        print(f"{row['held_out']:<20} {row['model']:<37} {row['train_samples']:>6} {row['eval_records']:>6} "
              f"{row['pairwise_accuracy']:>8.3f} {row['top1_recall']:>6.3f} {row['top5_recall']:>6.3f}")
    means = summary(rows)
    for name, figures in means.items():
        print(f"{'mean':<20} {name:<37} {'':>6} {'':>6} {figures['pairwise_accuracy']:>8.3f} "
              f"{figures['top1_recall']:>6.3f} {figures['top5_recall']:>6.3f}")
    for fp in fingerprints:
        about[fp]["records"] = sum(1 for s in dataset.samples if s.fingerprint_id == fp)
    document = {
        "bench": "cost_model_transfer", "date": utc_now().isoformat(timespec="seconds"), "cpu": cpu_model(),
        "tvm": tvm.__version__, "command": "bench/cost_model_transfer.py " + " ".join(argv or sys.argv[1:]),
        "conditions": args.conditions,
        "labels": "normalised per (workload, fingerprint): fastest time over each record's; only orders within "
                  "one workload of one fingerprint are scored",
        "own_share": args.own_share, "seed": args.seed, "kind": args.kind, "extract_seconds": round(extract_s, 1),
        "fingerprints": about, "summary": means, "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_no_nan(document), indent=1, allow_nan=False) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
