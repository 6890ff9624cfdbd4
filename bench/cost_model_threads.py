"""How many threads the XGBoost cost model should train and predict with: MetaSchedule's XGBModel
on one thread against every core, on a quiet box and beside busy cores.

MetaSchedule trains its XGBModel after every measured batch: up to 10,000 boosting rounds with a
Python callback a round (early stopping after 50 rounds without gain), each round a few short
OpenMP parallel regions. With every core busy (the suite's three workers on two cores, agents
sharing a box) a region waits for a descheduled thread. This script times `_train` and
`_predict` of the real XGBModel on samples shaped as MetaSchedule's features are (one row per
buffer store of a candidate, 164 features), for each thread count and sample count, with
``--busy N`` CPU-bound processes running beside it (0: quiet).

    .venv/bin/python bench/cost_model_threads.py [--samples 16 128 1024 8192] [--busy 0 2] [--json]

Prints wall and CPU seconds a training and a prediction (median of --repeat), and the rounds
trained. The figures go in docs/benchmarks.md, "The cost model's threads".
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time

from prepack import cpu_name, load_average  # bench/, beside this script

FEATURES = 164  # PerStoreFeature's width for CPU targets in TVM 0.27
PREDICTED = 512  # candidates a generation of the evolutionary search scores


def _spin(stop) -> None:
    while not stop.is_set():
        pass


def _samples(count: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    xs = [rng.random((int(rng.integers(2, 12)), FEATURES), dtype="float32") for _ in range(count)]
    # A workload's costs spread over two orders of magnitude, as a search's candidates do.
    ys = (1.0 / rng.uniform(1.0, 100.0, size=count)).astype("float32")
    return xs, ys


def _time(call) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(threads: int, count: int, repeat: int) -> dict:
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    xs, ys = _samples(count, seed=count)
    candidates, _ = _samples(PREDICTED, seed=1)
    trains, predicts, rounds = [], [], 0
    for _ in range(repeat):
        model = XGBModel(num_tuning_cores=threads, adaptive_training=False)
        trains.append(_time(lambda: model._train(xs=xs, ys=ys)))  # noqa: B023
        rounds = model.booster.num_boosted_rounds()
        predicts.append(_time(lambda: model._predict(xs=candidates)))  # noqa: B023
    return {
        "threads": threads, "samples": count, "rounds": rounds,
        "train_wall_s": statistics.median(w for w, _ in trains), "train_cpu_s": statistics.median(c for _, c in trains),
        "predict_wall_s": statistics.median(w for w, _ in predicts),
        "predict_cpu_s": statistics.median(c for _, c in predicts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[16, 128, 1024, 8192])
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count() or 1}))
    parser.add_argument("--busy", type=int, nargs="+", default=[0, os.cpu_count() or 1],
                        help="CPU-bound processes running beside the timing (0: quiet)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    rows = []
    header = {"cpu": cpu_name(), "cores": os.cpu_count(), "load_before": load_average(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    for busy in args.busy:
        stop = multiprocessing.Event()
        spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(busy)]
        for spinner in spinners:
            spinner.start()
        try:
            for count in args.samples:
                for threads in args.threads:
                    row = {"busy": busy, **measure(threads, count, args.repeat)}
                    rows.append(row)
                    if not args.json:
                        print(f"busy {busy}  samples {count:5d}  threads {threads}  rounds {row['rounds']:4d}  "
                              f"train {row['train_wall_s']:7.3f} s wall {row['train_cpu_s']:7.3f} s CPU  "
                              f"predict {PREDICTED} {row['predict_wall_s']:6.3f} s wall "
                              f"{row['predict_cpu_s']:6.3f} s CPU", flush=True)
        finally:
            stop.set()
            for spinner in spinners:
                spinner.join()
    if args.json:
        print(json.dumps({**header, "rows": rows}, indent=1))
    else:
        print(f"{header['cpu']}, {header['cores']} cores, load before {header['load_before']}, {header['date']}")


if __name__ == "__main__":
    main()
