"""Measure the transplanted seeds of each task before the search starts.

Transferred schedules are measured before anything uses them (Transfer-Tuning does the same;
a Tophub-style fallback that trusted another workload's config ran 200x slower, apache/tvm
#4404). Measured first, they are this job's own records of the task on this fingerprint: the
evolutionary search seeds its first population from them through `get_top_k` as it does from
any record, the build may use the best of them as it may any measured record, and a warm job
has a tuned schedule for every seeded task after its first round. Each task's best seed goes
first, across tasks, then the others. The cost model learns from
them like from any measured batch.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from foundation.meta_schedule.measured_batch import measure_and_commit

from .seed_metrics import SEEDS_MEASURED
from .seed_sources import SeedTrace
from .transplant import Transplanter

if TYPE_CHECKING:  # pragma: no cover
    import tvm

_LOG = logging.getLogger(__name__)


@dataclass
class SeedRoundReport:
    """What the seeds did: how many were measured, from where, and how many did not apply."""

    own_fingerprint: int = 0  # measured seeds transplanted from this fingerprint's records
    other_fingerprints: int = 0  # ... from other fingerprints' records
    rejected: int = 0  # donor traces that did not apply to the task (not measured)
    failed: int = 0  # measured seeds whose build or run failed
    per_task: list[int] = field(default_factory=list)
    best_sec: list[float | None] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return self.own_fingerprint + self.other_fingerprints

    def to_json(self) -> dict[str, Any]:
        return {"seeds_own_fingerprint": self.own_fingerprint,
                "seeds_other_fingerprints": self.other_fingerprints,
                "seeds_rejected": self.rejected, "seeds_failed": self.failed}


def transplanted_seeds(transplanter: Transplanter, mod: "tvm.IRModule", donors: Sequence[SeedTrace],
                       wanted: int, report: SeedRoundReport) -> list[tuple[Any, SeedTrace]]:
    """Up to ``wanted`` distinct valid schedules of ``mod`` from ``donors``, in their order."""
    import tvm_ffi
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.database import Workload
    from tvm.s_tir.schedule import Trace

    seen: set[int] = set()
    out: list[tuple[Any, SeedTrace]] = []
    for donor in donors:
        if len(out) >= wanted:
            break
        try:
            donor_schedule = Schedule(Workload.from_json(json.loads(donor.workload_json)).mod)
            Trace.apply_json_to_schedule(json.loads(donor.trace_json), donor_schedule)
        except Exception:  # a stored trace that no longer replays on its own workload
            report.rejected += 1
            continue
        schedule = transplanter.apply(donor_schedule.trace, mod)
        if schedule is None:
            report.rejected += 1
            continue
        program = int(tvm_ffi.structural_hash(schedule.mod))
        if program not in seen:
            seen.add(program)
            out.append((schedule, donor))
    return out


def measure_seeds(contexts: Sequence[Any], donors: Sequence[Sequence[SeedTrace]], per_task: int | Sequence[int],
                  target: "tvm.target.Target", builder, runner, database, cost_model=None,
                  space_generator: Any = "post-order-apply",
                  cancelled: threading.Event | None = None,
                  picked: Callable[[int | None], None] | None = None) -> SeedRoundReport:
    """Transplant up to ``per_task`` seeds for each task (or ``per_task[i]``: within each task's
    trial plan; ``contexts[i]`` its TuneContext,
    ``donors[i]`` its donor traces), measure them with the tuning's own builder and runner,
    and commit every result to ``database`` (failures too: history is training data).

    Each task's best seed is measured first, one task after another, and only then the rest of
    every task's seeds: after the first pass every seeded task has a measured schedule, so the
    model's latency estimate (each task's best time by its weight) exists after as many trials
    as there are seeded tasks, not after all their seeds (docs/benchmarks.md, "Warm starts").
    ``picked(i)`` is called before a batch of task i's seeds is measured, ``picked(None)`` at
    the end (the tuner's live progress attributes the builder's and runner's results by it)."""
    report = SeedRoundReport(per_task=[0] * len(contexts), best_sec=[None] * len(contexts))
    transplanter = Transplanter(target, space_generator)
    limits = [per_task] * len(contexts) if isinstance(per_task, int) else list(per_task)
    batch = _SeedBatch(target, builder, runner, database, report, picked)
    rest: dict[int, list[tuple[Any, SeedTrace]]] = {}
    for index, (context, task_donors) in enumerate(zip(contexts, donors)):  # the first pass: best seeds
        if cancelled is not None and cancelled.is_set():
            break
        if not task_donors or limits[index] <= 0:
            continue
        seeds = transplanted_seeds(transplanter, context.mod, task_donors, limits[index], report)
        if seeds:
            batch.measure(index, context, seeds[:1])
            rest[index] = seeds[1:]
    for index, seeds in rest.items():  # the second: the rest of each task's seeds
        if cancelled is not None and cancelled.is_set():
            break
        if seeds:
            batch.measure(index, contexts[index], seeds)
    if cost_model is not None:  # once per task, as one batch of its seeds would have taught it
        for index, (candidates, results) in batch.measured.items():
            cost_model.update(contexts[index], candidates, results)
    if picked is not None:
        picked(None)
    _LOG.info("seed round: %s", report.to_json())
    return report


class _SeedBatch:
    """Measures seeds of one task as one batch of the tuning's builder and runner, commits the
    results to the database, counts them in the report, and keeps them for the cost model."""

    def __init__(self, target: "tvm.target.Target", builder, runner, database, report: SeedRoundReport,
                 picked: Callable[[int | None], None] | None):
        self.target, self.builder, self.runner, self.database = target, builder, runner, database
        self.report, self.picked = report, picked
        self.measured: dict[int, tuple[list, list]] = {}  # task index -> (candidates, results)

    def measure(self, index: int, context: Any, seeds: Sequence[tuple[Any, SeedTrace]]) -> None:
        report = self.report
        if self.picked is not None:
            self.picked(index)
        candidates, results, committed = measure_and_commit(
            [schedule for schedule, _ in seeds], context.mod, self.target, self.builder, self.runner, self.database)
        for result, run_secs, (_, donor) in zip(results, committed, seeds):
            failed = result.error_msg is not None or not result.run_secs
            report.failed += failed
            SEEDS_MEASURED.labels(donor.source).inc()
            if donor.own:
                report.own_fingerprint += 1
            else:
                report.other_fingerprints += 1
            if not failed:
                mean = sum(run_secs) / len(run_secs)
                best = report.best_sec[index]
                report.best_sec[index] = mean if best is None else min(best, mean)
        report.per_task[index] += len(seeds)
        kept = self.measured.setdefault(index, ([], []))
        kept[0].extend(candidates)
        kept[1].extend(results)
