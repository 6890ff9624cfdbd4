"""Real MetaSchedule tuning of a tiny model: live per-task progress, records, cancellation."""

from __future__ import annotations

import re
import threading

import pytest

from foundation.meta_schedule.measure import MeasureSettings, WorkerPools
from foundation.meta_schedule.planned_search import (
    CANDIDATES_PER_TRIAL,
    FULL_POPULATION,
    FULL_POPULATION_FROM,
    MIN_POPULATION,
    SMALL_PLAN_GENERATIONS,
    SMALL_PLAN_POPULATION,
    SearchSize,
    population_for,
    search_size_for,
    sized_searches,
)
from foundation.meta_schedule.tuner import TuningBudget, tune

pytestmark = pytest.mark.slow


class Recorder:
    def __init__(self, cancel_after: int | None = None, cancelled: threading.Event | None = None):
        self.events: list[tuple[str, int, int]] = []
        self.finished_seen = False
        self.cancel_after = cancel_after
        self.cancelled = cancelled

    def started(self, tasks):
        self.events.append(("started", -1, len(tasks)))

    def measured(self, task, new_trials):
        assert not self.finished_seen, "progress after finished()"
        self.events.append(("measured", task.index, task.trials))
        if self.cancel_after is not None and task.trials >= self.cancel_after:
            self.cancelled.set()

    def batch_measured(self, task):
        assert not self.finished_seen, "progress after finished()"
        self.events.append(("batch", task.index, task.trials))

    def finished(self, tasks):
        self.finished_seen = True


@pytest.fixture(scope="module")
def mlp():
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    from foundation.compile import extract_tuning_tasks
    from foundation.models.loading import load_model

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    return target, extract_tuning_tasks(load_model("mlp-tiny", 1), target)


@pytest.fixture(scope="module")
def pools():
    return WorkerPools(MeasureSettings(min_repeat_ms=5))


def test_progress_is_live_and_records_land(mlp, pools, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    target, tasks = mlp
    db = ms.database.MemoryDatabase()
    recorder = Recorder()
    report = tune(tasks, target, db, TuningBudget(16, 8, 8), tmp_path, pools=pools, listener=recorder, seed=1)
    measured = [e for e in recorder.events if e[0] == "measured"]
    # One event per measured candidate (LocalRunner is synchronous), not one per joined batch.
    assert len(measured) == report.trials >= 16
    assert {e[1] for e in measured} == set(range(len(tasks)))
    for task in report.tasks:
        assert task.trials == 8 and task.best_sec is not None and task.best_sec > 0
        assert task.best_gflops is None or task.best_gflops > 0
    assert len(db) == report.trials  # every measured candidate was committed
    assert report.first_build_at is not None and not report.cancelled
    assert (tmp_path / "logs").is_dir()
    # Each task's untuned form first, a batch of its own (foundation.meta_schedule.untuned_form), then
    # the search's batch of 8 (num_trials_per_iter), less that trial: it ends after the task's eighth.
    batches = [e for e in recorder.events if e[0] == "batch"]
    assert sorted(batches) == sorted([("batch", task.index, 1) for task in report.tasks]
                                     + [("batch", task.index, 8) for task in report.tasks])
    assert all(task.planned == 8 for task in report.tasks)
    assert (tmp_path / "logs" / "tvm.log").is_file()  # where TVM's C++ warnings went


def test_cancel_stops_tuning_early(mlp, pools, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    target, tasks = mlp
    cancelled = threading.Event()
    recorder = Recorder(cancel_after=3, cancelled=cancelled)
    report = tune(tasks, target, ms.database.MemoryDatabase(), TuningBudget(200, 100, 8), tmp_path,
                  pools=pools, listener=recorder, cancelled=cancelled)
    assert report.cancelled
    assert report.trials < 40, report.trials  # far below the 200-trial budget


def test_each_batch_is_committed_before_the_next_is_measured(mlp, pools, tmp_path):
    """TVM's gradient scheduler commits no batch before every task has had one: a tune killed
    in that first round had measured everything and kept nothing."""
    from tvm.s_tir import meta_schedule as ms

    target, tasks = mlp
    db = ms.database.MemoryDatabase()
    seen: list[tuple[int, int]] = []  # (candidates measured with this result, records committed by then)
    batch_ends: list[int] = []  # the candidates measured when each batch ended

    class Watch(Recorder):
        def measured(self, task, new_trials):
            seen.append((new_trials, len(db)))  # asserted after: nothing may raise inside TVM

        def batch_measured(self, task):
            batch_ends.append(sum(n for n, _ in seen))

    report = tune(tasks, target, db, TuningBudget(32, 16, 8), tmp_path, pools=pools, listener=Watch(), seed=2)
    assert report.trials == 32 and len(db) == 32
    # Each task's untuned form (a batch of one), then the search's batches of up to 8.
    assert batch_ends[:len(tasks)] == list(range(1, len(tasks) + 1)) and len(batch_ends) >= len(tasks) + 4
    before = 0
    for new_trials, committed in seen:
        # Batches are measured one after another: every candidate of the batches before this one's is in.
        assert committed >= max([end for end in batch_ends if end <= before], default=0), (before, committed, seen)
        before += new_trials
    assert before == 32


def test_a_cancel_commits_the_batch_in_flight(mlp, pools, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    target, tasks = mlp
    cancelled = threading.Event()
    db = ms.database.MemoryDatabase()
    report = tune(tasks, target, db, TuningBudget(200, 100, 8), tmp_path, pools=pools,
                  listener=Recorder(cancel_after=3, cancelled=cancelled), cancelled=cancelled)
    assert report.cancelled
    # The untuned forms (one a task, measured first), then the batch in flight, no more.
    assert report.trials == len(tasks) + 8, report.trials
    assert len(db) == len(tasks) + 8


def test_builder_workers_stay_warm_across_batches(mlp):
    """TVM's LocalBuilder starts new processes per batch; the farm's builder reuses them."""
    from tvm.s_tir import meta_schedule as ms

    from foundation.hardware.tvm_startup import LeanWorkerInit
    from foundation.meta_schedule.warm_builder import warm_builder

    target, tasks = mlp
    builder = warm_builder(2, 60.0, LeanWorkerInit("llvm"))
    inputs = [ms.builder.BuilderInput(task.mod, target) for task in tasks]

    def worker_pids():
        return sorted(w._proc.pid for w in builder.pool._worker_map.values() if w._proc is not None)

    first = builder.build(inputs)
    assert all(r.error_msg is None for r in first), [r.error_msg for r in first]
    pids = worker_pids()
    second = builder.build(inputs)
    assert all(r.error_msg is None for r in second)
    assert pids and worker_pids() == pids
    builder.shutdown()


def test_search_population_follows_the_plan():
    """Small plans sample fewer candidates a round (at most 256) and evolve them fewer generations;
    from FULL_POPULATION_FROM on, MetaSchedule's own."""
    assert population_for(32) == 128 == CANDIDATES_PER_TRIAL * 32
    assert population_for(16) == population_for(1) == population_for(0) == MIN_POPULATION == 64
    assert population_for(FULL_POPULATION_FROM - 1) == 252 <= SMALL_PLAN_POPULATION == 256
    assert population_for(FULL_POPULATION_FROM) == population_for(1000) == FULL_POPULATION == 512
    assert search_size_for(16) == SearchSize(64, SMALL_PLAN_GENERATIONS) == SearchSize(64, 2)
    assert search_size_for(FULL_POPULATION_FROM) == SearchSize(512, 4)


def searched_rounds(work_dir) -> list[tuple[int, int]]:
    """Each search round in MetaSchedule's task logs under ``work_dir``: (its initial population,
    candidates picked from measured records and sampled, and the generations evolved)."""
    rounds = []
    for log in sorted((work_dir / "logs").glob("tvm.s_tir.meta_schedule.task_*.log")):
        for chunk in log.read_text().split("Generating candidates")[1:]:
            found = [int(n) for n in re.findall(r"(?:Sampled|Picked top) (\d+) candidate", chunk)]
            rounds.append((sum(found), len(re.findall(r"Evolve iter #\d+ done", chunk))))
    return rounds


def test_a_search_size_in_force_is_what_every_round_searches(mlp, pools, tmp_path):
    """sized_searches (bench/trial_cost.py's A/B): each round's population is that size, no more
    (MetaSchedule's floor of 50 new candidates held to it; the untuned form, measured first, is
    a record the round may pick), and evolves it that many generations;
    without it, the plan's size."""
    from tvm.s_tir import meta_schedule as ms

    target, tasks = mlp
    with sized_searches(SearchSize(population=12, generations=1)):
        assert search_size_for(8) == search_size_for(1000) == SearchSize(12, 1)
        with pytest.raises(RuntimeError, match="already in force"):
            with sized_searches(SearchSize(8, 2)):
                pass
        report = tune(tasks, target, ms.database.MemoryDatabase(), TuningBudget(8, 4, 4), tmp_path / "sized",
                      pools=pools, seed=1)
    assert report.trials == 8
    assert searched_rounds(tmp_path / "sized") == [(12, 1)] * len(tasks)

    assert search_size_for(4) == SearchSize(population_for(4), SMALL_PLAN_GENERATIONS)
    tune(tasks, target, ms.database.MemoryDatabase(), TuningBudget(8, 4, 4), tmp_path / "planned", pools=pools, seed=1)
    assert searched_rounds(tmp_path / "planned") == [(population_for(4), SMALL_PLAN_GENERATIONS)] * len(tasks)
    with pytest.raises(ValueError, match="at least 1"):
        SearchSize(0, 2)


def test_a_task_with_a_cap_of_its_own_stops_there(mlp, pools, tmp_path):
    """A reused task's top-up: one batch, while the other task takes the rest of the budget."""
    from tvm.s_tir import meta_schedule as ms

    target, tasks = mlp
    db = ms.database.MemoryDatabase()
    report = tune(tasks, target, db, TuningBudget(10, 8, 2), tmp_path, pools=pools, seed=1, trial_caps=[2, None])
    capped, free = report.tasks
    assert (capped.trials, capped.budget, capped.planned) == (2, 2, 2)
    assert free.trials == 8 and free.budget == 8  # the cap did not end the tuning early
    assert len(db) == report.trials == 10
    with pytest.raises(ValueError, match="1 trial caps for 2 tasks"):
        tune(tasks, target, db, TuningBudget(4, 2, 2), tmp_path, pools=pools, trial_caps=[None])
    assert tune([], target, db, TuningBudget(4, 2, 2), tmp_path, pools=pools).trials == 0


def test_a_two_phase_plan_gives_its_second_phase_to_the_task_furthest_from_its_ceiling(mlp, pools, tmp_path):
    """The first phase tunes half of each task's trials by FLOPs; the second re-plans the rest from the
    records just measured: each task's best time x calls less its FLOPs at the peak."""
    from tvm.s_tir import meta_schedule as ms

    from foundation.domain.trial_phases import ceiling_ms, first_phase, first_phase_trials
    from foundation.meta_schedule.tuner import _best_ms, trial_plan

    target, tasks = mlp
    db = ms.database.MemoryDatabase()
    budget = TuningBudget.for_tasks(len(tasks), 32, None, phased=True)
    plan = first_phase(trial_plan(tasks, budget, db))
    first = first_phase_trials(plan)
    assert plan.phases == (sum(first), 32 - sum(first)) and all(f < t for f, t in zip(first, plan.trials))
    peak = 100.0
    report = tune(tasks, target, db, budget, tmp_path, pools=pools, seed=1, plan=plan, peak_gflops=peak)
    tuned = report.plan
    assert tuned is not None and tuned.peak_gflops == peak
    assert [line.phases[0] for line in tuned.tasks] == first  # the first phase measured what it planned
    assert [t.trials for t in report.tasks] == [line.trials for line in tuned.tasks]  # ... and the second too
    assert [t.planned for t in report.tasks] == tuned.trials
    assert report.trials == len(db) == tuned.total == 32
    assert tuned.phases == (sum(first), 32 - sum(first))
    # Each task's loss, as the records the first phase committed give it, is what the second phase went by.
    losses = [tuned.tasks[i].loss_ms for i in range(len(tasks))]
    assert all(loss is not None and loss > 0 for loss in losses)
    second = [line.phases[1] for line in tuned.tasks]
    furthest = losses.index(max(losses))
    assert second[furthest] == max(second) and second[furthest] > second[1 - furthest]
    # Re-reading the database now (after the second phase too) only lowers each task's best time.
    for task, loss in zip(tasks, losses):
        now = _best_ms(db, task.mod) * task.weight - ceiling_ms(task.flop, task.weight, peak)
        assert now <= loss + 1e-9
