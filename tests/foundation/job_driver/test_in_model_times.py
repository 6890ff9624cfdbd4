"""Budget by what the model loses: each task timed inside a real built model, its ceiling, and the rounds
after the first of a job tuned in rounds planned by them (real MetaSchedule, mlp-tiny)."""

from __future__ import annotations

import pytest

from foundation.domain.weights_layout import WeightsLayout
from foundation.job_driver.in_model_times import in_model_times, kernel_names, task_ceiling_ms

from support.tvm_records import lean_cpu_target

FORM = WeightsLayout.PREPACKED_NCHWC  # the CPU's default
DEVICE = {"peak_gflops": 20.0}


@pytest.fixture(scope="module")
def target():
    return lean_cpu_target()


@pytest.fixture(scope="module")
def mlp(target):
    from foundation.compile import build_library, extract_tuning_tasks
    from foundation.models.loading import load_model

    loaded = load_model("mlp-tiny", 1)
    tasks = extract_tuning_tasks(loaded, target, prepack=FORM.prepacks, block_activations=FORM.blocks_activations)
    library = build_library(loaded, target, None, prepack=FORM.prepacks, block_activations=FORM.blocks_activations)
    return loaded, tasks, library


def test_every_task_of_the_built_model_is_timed_inside_it(mlp, target):
    loaded, tasks, library = mlp
    names = kernel_names(loaded, target, FORM, tasks)
    assert set(names.values()) == set(range(len(tasks)))  # each task is some kernel of the library
    times = in_model_times(library, loaded, target, FORM, tasks, seed=0, device=DEVICE, runs=3)
    assert times.runs == 3 and len(times.task_ms) == len(tasks)
    assert all(ms is not None and ms > 0 for ms in times.task_ms), times
    assert all(c > 0 for c in times.ceiling_ms)
    assert times.to_json()["task_ms"] == list(times.task_ms)


def test_a_ceiling_is_the_flops_at_the_peak(mlp):
    _, tasks, _ = mlp
    dense = next(t for t in tasks if "matmul" in t.name)
    assert task_ceiling_ms(dense, DEVICE) == pytest.approx(dense.flop / 20e6 * dense.weight)
    assert task_ceiling_ms(dense, {}) == 0.0  # a box without measured features: the loss is the time


def test_the_next_rounds_trials_go_to_the_task_the_model_loses_most_on(mlp):
    from foundation.meta_schedule import tuner

    _, tasks, _ = mlp
    budget = tuner.TuningBudget(64, 64, 8)
    by_flops = tuner.trial_plan(tasks, budget)
    heaviest = max(range(len(tasks)), key=lambda i: tasks[i].flop * tasks[i].weight)
    lightest = min((i for i in range(len(tasks)) if "matmul" in tasks[i].name), key=lambda i: tasks[i].flop)
    assert by_flops.trials[heaviest] > by_flops.trials[lightest]
    # In the model the light task runs far above its ceiling, the heavy one at it.
    in_model = [0.01] * len(tasks)
    in_model[lightest], in_model[heaviest] = 2.0, 0.5
    ceilings = [0.0] * len(tasks)
    ceilings[heaviest] = 0.5
    plan = tuner.trial_plan(tasks, budget, in_model_ms=in_model, ceiling_ms=ceilings)
    assert plan.trials[lightest] > plan.trials[heaviest]
    assert plan.tasks[heaviest].minor and plan.tasks[heaviest].loss_ms == 0.0
    assert plan.tasks[lightest].in_model_ms == 2.0


@pytest.mark.slow
def test_rounds_after_the_first_are_planned_by_the_time_each_task_takes_in_the_model(mlp, target, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from farm.cli.views import plan_lines
    from foundation.domain.tuning_rounds import UntilRequest, parse_goal
    from foundation.job_driver.rounds_loop import TunedRound, TuningInRounds
    from foundation.job_driver.tuning_rounds import set_up_goal
    from foundation.meta_schedule import tuner
    from foundation.meta_schedule.measure import MeasureSettings, WorkerPools

    loaded, tasks, _ = mlp
    until = UntilRequest(parse_goal("0.001ms"), patience=5, round_trials=4)  # never reached: every round runs
    outcome, judge = set_up_goal(until, loaded, target, 0, None)
    database = ms.database.MemoryDatabase()
    budget = tuner.TuningBudget(8, 8, 2)
    rounds = TuningInRounds(until, tasks, budget, loaded, target, FORM, judge, lambda: database)
    plans = []
    with WorkerPools(MeasureSettings(min_repeat_ms=5)) as pools:
        def tune_round(number, plan):
            plans.append(plan)
            report = tuner.tune(tasks, target, database, tuner.TuningBudget(plan.budget, 8, 2), tmp_path / str(number),
                                pools=pools, plan=plan, seed=number)
            return TunedRound(report.trials, [t.trials for t in report.tasks])

        rounds.run(outcome, tune_round)
    assert len(plans) == 2 and len(outcome.rounds) == 2
    first, second = plans
    assert all(line.in_model_ms is None for line in first.tasks)  # nothing built yet: by the records
    assert all(line.in_model_ms is not None and line.in_model_ms > 0 for line in second.tasks)
    losses = [line.loss_ms for line in second.tasks]
    assert [line.share for line in second.tasks] == pytest.approx([loss / sum(losses) for loss in losses])
    assert rounds.in_model is not None and list(rounds.in_model.task_ms) == [line.in_model_ms for line in second.tasks]
    # What `farm status` shows of the plan says why.
    assert "what the model loses" in plan_lines(second.to_json())[0]
