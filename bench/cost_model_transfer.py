"""Leave one fingerprint out: how well cost models trained on other hardware rank a box's records.

Builds the dataset from a registry (and, with --shipped, the packs tvm-farm ships): every record
of every fingerprint of one hardware kind, as MetaSchedule's program features with its
fingerprint's device features (foundation.meta_schedule.warm.cross_samples). Then, for each
fingerprint in turn, ranks its records workload by workload with:

- untrained: an untrained XGBModel predicts at random; its expected scores are shown
  (pairwise 0.5, top-k recall k/n);
- cross, no device: trained on the other fingerprints' records, program features only;
- cross + device: the same with each fingerprint's device features (the farm's xgb-cross model);
- own 7%: trained on a random 7% (--own-share) of the held-out fingerprint's own records.

All four are scored on the same records: the held-out fingerprint's valid records less the
ones the own model trained on. Measures per workload, pooled: pairs put in the right order;
top-1 and top-5 recall (the share of the k fastest among the k ranked first).
Prints the table and writes every row to --out (CSV).

    .venv/bin/python bench/cost_model_transfer.py REGISTRY_URL [--shipped] [--kind cpu]
        [--own-share 0.07] [--seed 0] [--out docs/results/cost_model_transfer.csv]

Exit codes: 0 done; 2 bad arguments; 3 fewer than two fingerprints with records.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ("untrained", "cross, no device", "cross + device", "own 7%")
COLUMNS = ("held_out", "model", "train_samples", "eval_records", "workloads", "pairs", "pairwise_accuracy",
           "top1_recall", "top5_recall")


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
    """The four models' rows for fingerprint ``held``."""
    import numpy as np

    from foundation.meta_schedule.warm.cross_model import train

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
    models = {"untrained": None}
    if others:
        models["cross, no device"] = train(others, None)
        models["cross + device"] = train(others, vectors)
    if own_train:
        models["own 7%"] = train(own_train, None)
    train_sizes = {"untrained": 0, "cross, no device": len(others), "cross + device": len(others),
                   "own 7%": len(own_train)}
    rows = []
    for name in MODELS:
        if name not in models:
            continue
        model = models[name]
        scored_groups = [(None if model is None else list(model.predict([s.program for s in g], vectors[held])),
                          [s.cost for s in g]) for g in groups]
        rows.append({"held_out": held, "model": name, "train_samples": train_sizes[name],
                     "eval_records": sum(len(g) for g in groups), **ranking(scored_groups)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("registry")
    parser.add_argument("--shipped", action="store_true", help="add the records of the packs tvm-farm ships")
    parser.add_argument("--kind", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--own-share", type=float, default=0.07)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "cost_model_transfer.csv")
    args = parser.parse_args(argv)
    if not 0 < args.own_share < 1:
        print(f"error: --own-share takes a share between 0 and 1, not {args.own_share}", file=sys.stderr)
        return 2

    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm" if args.kind == "cpu" else "cuda")
    import tvm

    from foundation.meta_schedule.warm.cross_samples import registry_dataset
    from foundation.registry.packs import read_pack
    from foundation.registry.shipped_packs import shipped_packs
    from foundation.registry.store import RegistryStore

    stores = [RegistryStore(args.registry, create=False)]
    if args.shipped:
        stores += [read_pack(path)[0] for path in shipped_packs()]
    try:
        dataset = registry_dataset(stores, tvm.__version__, args.kind)
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
    print(f"{'held out':<20} {'model':<17} {'train':>6} {'scored':>6} {'pairwise':>8} {'top-1':>6} {'top-5':>6}")
    for row in rows:
        print(f"{row['held_out']:<20} {row['model']:<17} {row['train_samples']:>6} {row['eval_records']:>6} "
              f"{row['pairwise_accuracy']:>8.3f} {row['top1_recall']:>6.3f} {row['top5_recall']:>6.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
