"""A task's search strategy held to its planned trials (foundation.domain.trial_plan).

MetaSchedule hands every task's strategy the same per-task maximum and batch size. Wrapped
here, each task's strategy is told its own plan instead: MetaSchedule's evolutionary search
then sizes its last batch to what is left of it (no batch overshoots), and returns no more
candidates once it is spent, which ends the task. A task planned zero trials is never
searched (no design space sampled, no population evolved).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# A search round samples and evolves a population and measures a handful of the cost model's
# picks from it. MetaSchedule's 512 evolved 4 generations costs ~13 s per task per round on the
# 2-core machines of docs/benchmarks.md, most of a small tune's time. Below FULL_POPULATION_FROM
# planned trials a task samples CANDIDATES_PER_TRIAL per trial, within [MIN_POPULATION,
# SMALL_PLAN_POPULATION], and evolves it SMALL_PLAN_GENERATIONS: on the quick start (16 trials a
# task) 64 evolved 2 generations tuned 1.9-2.3x the trials/s of 256 evolved 4 (two seeds), to the
# same or better latency (docs/benchmarks.md, "Cheaper trials").
FULL_POPULATION_FROM = 64
FULL_POPULATION = 512  # MetaSchedule's own
CANDIDATES_PER_TRIAL = 4
MIN_POPULATION = 64
SMALL_PLAN_POPULATION = 256
FULL_GENERATIONS = 4  # MetaSchedule's own genetic_num_iters
SMALL_PLAN_GENERATIONS = 2
INIT_MIN_UNMEASURED = 50  # MetaSchedule's own
INIT_MEASURED_RATIO = 0.2  # MetaSchedule's own: the share of the population picked from measured records
# The share of each measured batch MetaSchedule picks at random from the round's fresh samples
# instead of by the cost model (its eps_greedy). Its own 0.05 of a batch of 16 rounds down to no
# pick at all (`num * eps_greedy` truncated), which a cold search does not miss: its model is
# untrained, so its first picks are as good as random. A warm search's picks are all steered by
# seeds and a model trained elsewhere, and narrowed around them (issue 53: warm 1.12-1.57x cold
# on a pair nobody tuned while building the seeds); a quarter of every batch drawn as a cold
# search would draw it keeps it exploring beyond them.
COLD_EXPLORATION = 0.05  # MetaSchedule's own
WARM_EXPLORATION = 0.25


@dataclass(frozen=True)
class SearchSize:
    """One search round's size: the population sampled and evolved, and its generations."""

    population: int
    generations: int

    def __post_init__(self) -> None:
        if self.population < 1 or self.generations < 1:
            raise ValueError(f"a search needs a population and generations of at least 1, not {self}")


def population_for(planned_trials: int) -> int:
    """The evolutionary search's population for a task planned this many trials."""
    if planned_trials >= FULL_POPULATION_FROM:
        return FULL_POPULATION
    return max(MIN_POPULATION, min(SMALL_PLAN_POPULATION, CANDIDATES_PER_TRIAL * planned_trials))


def generations_for(planned_trials: int) -> int:
    """The evolutionary search's generations a round for a task planned this many trials."""
    return FULL_GENERATIONS if planned_trials >= FULL_POPULATION_FROM else SMALL_PLAN_GENERATIONS


def search_size_for(planned_trials: int) -> SearchSize:
    """A task's round of search: `sized_searches`' size while one is in force, else by its plan."""
    if _forced.size is not None:
        return _forced.size
    return SearchSize(population_for(planned_trials), generations_for(planned_trials))


class _Forced:
    size: SearchSize | None = None
    lock = threading.Lock()


_forced = _Forced()


@contextmanager
def sized_searches(size: SearchSize) -> Iterator[None]:
    """Every task's search started in this process meanwhile gets ``size``, whatever its plan:
    for a benchmark that sets one search size against another (bench/trial_cost.py)."""
    with _forced.lock:
        if _forced.size is not None:
            raise RuntimeError("a search size is already in force")
        _forced.size = size
    try:
        yield
    finally:
        _forced.size = None


def planned_search(plan: list[int], index: int, exploration: float = COLD_EXPLORATION):
    """MetaSchedule's evolutionary search for task ``index``, sized to and stopped at
    ``plan[index]`` as it is when the search starts (the tuner takes seeds measured before
    out of it); ``exploration`` of each batch is picked at random from fresh samples."""
    if not 0.0 <= exploration <= 1.0:
        raise ValueError(f"an exploration share is between 0 and 1, not {exploration}")
    from tvm.s_tir import meta_schedule as ms

    size = search_size_for(plan[index])
    # A round's population is up to INIT_MEASURED_RATIO of it picked from measured records, the
    # rest sampled; MetaSchedule samples that rest again and again until it has
    # init_min_unmeasured (50) new candidates, whatever the population. Held to what the picks
    # can leave (the population less its most picks), one sampling fills the population.
    most_picked = int(size.population * INIT_MEASURED_RATIO)
    inner = ms.search_strategy.EvolutionarySearch(
        population_size=size.population, init_measured_ratio=INIT_MEASURED_RATIO,
        init_min_unmeasured=min(INIT_MIN_UNMEASURED, size.population - most_picked),
        genetic_num_iters=size.generations, eps_greedy=exploration)
    return _planned(inner, plan, index)


def _planned(inner, plan: list[int], index: int):
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

    @derived_object
    class _PlannedSearch(PySearchStrategy):
        def __init__(self):
            self.inner = inner
            self.searching = False

        def _initialize_with_tune_context(self, context) -> None:
            self.inner._initialize_with_tune_context(context)

        def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
            trials = min(int(max_trials), plan[index])
            self.searching = trials > 0
            if self.searching:
                self.inner.pre_tuning(trials, max(1, min(int(num_trials_per_iter), trials)), design_spaces,
                                      database, cost_model)

        def post_tuning(self) -> None:
            if self.searching:
                self.inner.post_tuning()
                self.searching = False

        def generate_measure_candidates(self):
            return self.inner.generate_measure_candidates() if self.searching else None

        def notify_runner_results(self, measure_candidates, results) -> None:
            if self.searching:
                self.inner.notify_runner_results(measure_candidates, results)

        def clone(self):
            return _planned(self.inner.clone(), plan, index)

    return _PlannedSearch()
