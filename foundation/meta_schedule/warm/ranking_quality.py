"""How well a cost model ranks measured records it never saw: what a search needs from it.

A search asks the model which of many candidates of one workload to measure, so what counts is
the order within a workload, not the predicted numbers. Two measures over held-out records,
each with what a random ranking (an untrained XGBModel predicts uniformly at random) scores on
average: the share of pairs of one workload put in the right order (random: 0.5), and top-k
recall, the share of a workload's k fastest records among the k the model ranks first
(random: k/n).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.registry.entities import StoredRecord


@dataclass(frozen=True)
class RankingQuality:
    pairs: int
    pairwise_accuracy: float
    top_k: int
    top_k_recall: float
    random_top_k_recall: float  # what a random order scores on average on the same groups
    workloads: int

    def to_json(self) -> dict:
        return {"pairs": self.pairs, "pairwise_accuracy": self.pairwise_accuracy, "top_k": self.top_k,
                "top_k_recall": self.top_k_recall, "random_top_k_recall": self.random_top_k_recall,
                "random_pairwise_accuracy": 0.5, "workloads": self.workloads}


def ranking_quality(model, target: "tvm.target.Target", workloads: dict[int, "tvm.IRModule"],
                    records: Sequence["StoredRecord"], top_k: int = 5) -> RankingQuality:
    """Rank each workload's valid held-out ``records`` by ``model``'s predictions."""
    from tvm.s_tir import meta_schedule as ms

    from .cost_models import _samples

    valid = [r for r in records if r.mean_sec is not None and r.workload_id in workloads]
    by_workload: dict[int, list] = {}
    for record in valid:
        by_workload.setdefault(record.workload_id, []).append(record)
    right = pairs = 0
    recalls, random_recalls = [], []
    for workload_id, group in by_workload.items():
        if len(group) < 2:
            continue
        mod = workloads[workload_id]
        candidates, results = _samples(mod, group)
        if len(candidates) < 2:
            continue
        context = ms.TuneContext(mod=mod, target=target, task_name="ranking")
        scores = list(model.predict(context, candidates))
        times = [float(r.run_secs[0]) for r in results]
        for i in range(len(times)):
            for j in range(i + 1, len(times)):
                if times[i] == times[j]:
                    continue
                pairs += 1
                # A higher score means faster.
                right += (scores[i] > scores[j]) == (times[i] < times[j])
        k = min(top_k, len(times))
        fastest = set(sorted(range(len(times)), key=times.__getitem__)[:k])
        ranked = set(sorted(range(len(times)), key=lambda i: -scores[i])[:k])
        recalls.append(len(fastest & ranked) / k)
        random_recalls.append(k / len(times))
    return RankingQuality(pairs, float(right / pairs) if pairs else 0.0, top_k, _mean(recalls),
                          _mean(random_recalls), len(recalls))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
