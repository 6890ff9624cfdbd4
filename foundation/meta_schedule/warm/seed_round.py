"""Measure the transplanted seeds of each task before the search starts.

Transferred schedules are measured before anything uses them (Transfer-Tuning does the same;
a Tophub-style fallback that trusted another workload's config ran 200x slower, apache/tvm
#4404). Measured first, they are this job's own records of the task on this fingerprint: the
evolutionary search seeds its first population from them through `get_top_k` as it does from
any record, the build may use the best of them as it may any measured record, and a warm job
has a tuned schedule for every seeded task after its first round. Each task's best seed goes
first, across tasks, then the others of the tasks whose best seed beat their untuned form. The
cost model learns from them like from any measured batch.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from foundation.meta_schedule.measured_batch import measure_and_commit
from foundation.meta_schedule.untuned_form import best_record, is_untuned_trace

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
    held_back: int = 0  # seeds not measured: their task's best seed lost to its untuned form
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


class SeedRound:
    """Transplant up to ``per_task`` seeds for each task (or ``per_task[i]``: within each task's
    trial plan; ``contexts[i]`` its TuneContext, ``donors[i]`` its donor traces), measure them with
    the tuning's own builder and runner, and commit every result to ``database`` (failures too:
    history is training data).

    `measure_best` measures each task's best seed, one task after another; `measure_rest` the rest
    of every task's seeds. After the first pass every seeded task has a measured schedule, so the
    model's latency estimate (each task's best time by its weight) exists after as many trials as
    there are seeded tasks (docs/benchmarks.md, "Warm starts"); the tuner measures each task's
    untuned form between the two passes. ``picked(i)`` is called before a batch of task i's seeds
    is measured, ``picked(None)`` at the end (the tuner's live progress attributes the builder's
    and runner's results by it)."""

    def __init__(self, contexts: Sequence[Any], donors: Sequence[Sequence[SeedTrace]], per_task: int | Sequence[int],
                 target: "tvm.target.Target", builder, runner, database,
                 space_generator: Any = "post-order-apply",
                 cancelled: threading.Event | None = None,
                 picked: Callable[[int | None], None] | None = None):
        self.contexts, self.donors, self.target = contexts, donors, target
        self.space_generator, self.cancelled, self.picked = space_generator, cancelled, picked
        self.limits = [per_task] * len(contexts) if isinstance(per_task, int) else list(per_task)
        self.report = SeedRoundReport(per_task=[0] * len(contexts), best_sec=[None] * len(contexts))
        self._batch = _SeedBatch(target, builder, runner, database, self.report, picked)
        self._rest: dict[int, list[tuple[Any, SeedTrace]]] = {}

    def _cancelled(self) -> bool:
        return self.cancelled is not None and self.cancelled.is_set()

    def measure_best(self) -> None:
        transplanter = Transplanter(self.target, self.space_generator)
        for index, (context, task_donors) in enumerate(zip(self.contexts, self.donors)):
            if self._cancelled():
                break
            if not task_donors or self.limits[index] <= 0:
                continue
            seeds = transplanted_seeds(transplanter, context.mod, task_donors, self.limits[index], self.report)
            if seeds:
                self._batch.measure(index, context, seeds[:1])
                self._rest[index] = seeds[1:]
        if self.picked is not None:
            self.picked(None)

    def measure_rest(self) -> None:
        """The other seeds of each task whose best seed beat everything else measured of it (its
        untuned form, when measured): where the donor's best does not transfer, its runners-up
        rarely do, and their trials go to the search instead."""
        for index, seeds in self._rest.items():
            if self._cancelled():
                break
            if not seeds:
                continue
            if self._best_is_untuned(index):
                self.report.held_back += len(seeds)
                continue
            self._batch.measure(index, self.contexts[index], seeds)
        self._rest.clear()
        if self.picked is not None:
            self.picked(None)

    def _best_is_untuned(self, index: int) -> bool:
        best = best_record(self._batch.database, self.contexts[index].mod)
        return best is not None and is_untuned_trace(best.trace)

    def finish(self, cost_model=None) -> SeedRoundReport:
        """Teach ``cost_model`` (when given) once per task, as one batch of its seeds would have."""
        if cost_model is not None:
            for index, (candidates, results) in self._batch.measured.items():
                cost_model.update(self.contexts[index], candidates, results)
        _LOG.info("seed round: %s, %d held back", self.report.to_json(), self.report.held_back)
        return self.report


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
