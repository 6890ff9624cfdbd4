"""How fast a fingerprint's tuned kernels ran alone: each workload's FLOPs (TVM's estimate of its
PrimFunc) over its best record's time, fastest first. The evidence of a box's peak where its probe
reads low (bench/refresh_packs.py, bench/evaluate.py)."""

from __future__ import annotations

import json
from typing import Any


def fastest_kernels(store, fingerprint_id: str) -> list[dict[str, Any]]:
    """Each workload with a valid record of ``fingerprint_id`` in ``store`` (a RegistryStore): its
    arguments' shapes (which kernel it is), GFLOP, best time and GFLOP/s, fastest first."""
    import tvm  # noqa: F401  (registers what the workloads' JSON names)
    from tvm.s_tir.analysis import estimate_tir_flops
    from tvm.s_tir.meta_schedule.database import Workload

    best: dict[int, float] = {}
    shapes: dict[int, list] = {}
    for record in store.records.all_records(fingerprint_id=fingerprint_id):
        seconds = record.mean_sec
        if seconds is not None and 0 < seconds < 1e9:
            best[record.workload_id] = min(best.get(record.workload_id, seconds), seconds)
            shapes.setdefault(record.workload_id, [a[2] for a in json.loads(record.args_info or "[]")])
    kernels = []
    for workload_id, (_shash, mod_json) in store.records.get_workloads(set(best)).items():
        flops = float(estimate_tir_flops(Workload.from_json(json.loads(mod_json)).mod))
        kernels.append({"workload_id": workload_id, "shapes": shapes.get(workload_id), "gflop": round(flops / 1e9, 4),
                        "best_ms": round(best[workload_id] * 1e3, 4),
                        "gflops": round(flops / best[workload_id] / 1e9, 1)})
    kernels.sort(key=lambda k: -k["gflops"])
    return kernels
