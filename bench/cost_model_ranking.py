"""How well a cost model trained on a fingerprint's records ranks records of jobs it never saw.

For each job of the registry in turn, an XGBModel is trained (as the farm trains its stored
model: foundation.meta_schedule.warm.cost_models.learn) on the records of every other job of
the fingerprint, and ranks the held-out job's records workload by workload
(foundation.meta_schedule.warm.ranking_quality): pairs in the right order, and top-k recall,
against an untrained model (which predicts at random) and the random expectation. The trained
model is ranked as a job would use it: stored and loaded (model_bytes, model_from_bytes).
`--train-records N,M` trains on N (then M) records drawn at random from the other jobs', to see
how the ranking grows with the data.

    .venv/bin/python bench/cost_model_ranking.py REGISTRY_URL [--fingerprint ID] [--top-k 3]
        [--train-records 100,200] [--seed 0] [--json]

Exit codes: 0 done; 2 bad arguments; 3 fewer than two jobs with records.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from timing import cpu_model, load_average  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("registry")
    parser.add_argument("--fingerprint")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--train-records", default="all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.top_k < 1:
        print("error: --top-k must be at least 1 (pass a positive number)", file=sys.stderr)
        return 2
    try:
        sizes = [None if size == "all" else int(size) for size in args.train_records.split(",")]
    except ValueError:
        sizes = [0]
    if any(size is not None and size < 1 for size in sizes):
        print(f"error: --train-records takes positive counts or 'all', separated by commas, not {args.train_records!r}",
              file=sys.stderr)
        return 2

    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.database import Workload

    from foundation.meta_schedule.warm.cost_models import learn, model_bytes, model_from_bytes, new_model
    from foundation.meta_schedule.warm.ranking_quality import ranking_quality
    from foundation.registry.store import RegistryStore

    store = RegistryStore(args.registry, create=False)
    fingerprint = args.fingerprint or store.list_fingerprints()[0].id
    records = store.records.all_records(fingerprint_id=fingerprint)
    jobs = sorted({r.job_id for r in records if r.job_id})
    if len(jobs) < 2:
        print(f"error: {fingerprint} has records of {len(jobs)} job(s) (tune at least two models first)",
              file=sys.stderr)
        return 3
    target = tvm.target.Target(json.loads(next(j.target for j in store.list_jobs() if j.id in jobs)))
    modules = {i: Workload.from_json(json.loads(j)).mod
               for i, (_s, j) in store.records.get_workloads({r.workload_id for r in records}).items()}
    rows = []
    draw = np.random.default_rng(args.seed)
    for held in jobs:
        others = [r for r in records if r.job_id != held]
        test = [r for r in records if r.job_id == held]
        for size in sizes:
            train = others if size is None or size >= len(others) else \
                [others[i] for i in sorted(draw.choice(len(others), size, replace=False))]
            begin = time.monotonic()
            model = new_model()
            learned = learn(model, target, modules, train)
            seconds = time.monotonic() - begin
            # As a job loads it. The model `learn` trained still predicts at random below
            # XGBModel's 100 warm-up samples, which once made this bench compare two random rankings.
            model = model_from_bytes(model_bytes(model))
            trained = ranking_quality(model, target, modules, test, top_k=args.top_k)
            np.random.seed(args.seed)  # the untrained model's scores are NumPy's uniform draws
            untrained = ranking_quality(new_model(), target, modules, test, top_k=args.top_k)
            rows.append({"held_out_job": held, "train_records": learned, "test_records": len(test),
                         "train_seconds": round(seconds, 1), "trained": trained.to_json(),
                         "untrained": untrained.to_json()})
    document = {"command": "bench/cost_model_ranking.py " + " ".join(sys.argv[1:] if argv is None else argv),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "cpu": cpu_model(), "load": load_average(), "fingerprint": fingerprint, "rows": rows}
    store.dispose()
    if args.json:
        print(json.dumps(document, indent=1))
        return 0
    print(f"{document['date']}  {document['cpu']}  load {document['load']}")
    print(f"| held-out job | train records | pairs | pairwise right: trained / untrained (random 0.5) "
          f"| top-{args.top_k} recall: trained / untrained / random |")
    print("|---|---|---|---|---|")
    for row in rows:
        t, u = row["trained"], row["untrained"]
        print(f"| {row['held_out_job']} | {row['train_records']} | {t['pairs']} | {t['pairwise_accuracy']:.2f} / "
              f"{u['pairwise_accuracy']:.2f} | {t['top_k_recall']:.2f} / {u['top_k_recall']:.2f} / "
              f"{t['random_top_k_recall']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
