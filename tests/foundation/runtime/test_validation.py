"""Output comparison and the tuning budget (pure numpy / dataclasses)."""

import numpy as np

from foundation.meta_schedule.tuner import TuningBudget
from foundation.runtime.validation import compare_outputs


def test_equal_and_slightly_reordered_outputs_pass():
    ref = np.random.default_rng(0).standard_normal((4, 10)).astype("float32") * 50
    noisy = ref * (1 + 1e-6)
    result = compare_outputs([noisy], [ref])
    assert result.passed, result.reason
    assert 0 < result.max_abs_err < 1e-3


def test_a_wrong_element_fails_and_says_where():
    ref = np.ones((2, 3), dtype="float32")
    bad = ref.copy()
    bad[1, 2] = 1.5
    result = compare_outputs([bad], [ref])
    assert not result.passed
    assert "(1, 2)" in result.reason and "1 of 6" in result.reason
    assert result.max_abs_err == 0.5


def test_shape_count_and_nan_mismatches_fail():
    ref = np.zeros((2, 2), dtype="float32")
    assert "shape" in compare_outputs([np.zeros((2, 3), "float32")], [ref]).reason
    assert "outputs" in compare_outputs([ref, ref], [ref]).reason
    assert "NaN" in compare_outputs([np.full((2, 2), np.nan, "float32")], [ref]).reason


def test_budget_defaults_to_per_task_times_tasks():
    b = TuningBudget.for_tasks(10, None, None)  # spread by the trial plan, no task capped below the whole
    assert (b.max_trials_global, b.max_trials_per_task) == (320, 320)
    b = TuningBudget.for_tasks(10, 1000, None)  # a global budget alone caps no task below it
    assert (b.max_trials_global, b.max_trials_per_task) == (1000, 1000)
    b = TuningBudget.for_tasks(10, None, 8)
    assert (b.max_trials_global, b.max_trials_per_task) == (80, 8)
    b = TuningBudget.for_tasks(3, 12, 8)
    assert (b.max_trials_global, b.max_trials_per_task, b.num_trials_per_iter) == (12, 8, 8)


def test_the_threads_are_chosen_from_calls_spanning_a_window_not_three_calls():
    from foundation.runtime.validation import THREADS_WINDOW_MS, fastest_call

    # A microsecond library whose first three calls a time slice given to another process covered.
    times = iter([4.0, 4.0, 4.0] + [0.005] * 100_000)
    made = []

    def call() -> float:
        made.append(next(times))
        return made[-1]

    assert fastest_call(call) == 0.005
    assert sum(made) >= THREADS_WINDOW_MS and len(made) > 3
    # A library slower than the window is called three times, as before.
    slow = iter([30.0, 31.0, 29.0, 1.0])
    assert fastest_call(lambda: next(slow)) == 29.0


def test_a_disturbed_timing_is_taken_again_and_the_quieter_kept(monkeypatch):
    import foundation.runtime.validation as validation

    monkeypatch.setattr(validation, "RETIME_PAUSE_S", 0.0)
    burst = [[22.0, 49.0, 71.2, 23.0], [55.3, 21.9, 88.4, 48.7], [22.3, 60.1, 47.5, 21.0]]
    calls = []

    def quiet_call() -> float:
        calls.append(21.5 + 0.1 * (len(calls) % 5))
        return calls[-1]

    kept = validation._undisturbed(quiet_call, burst, per_block=4)
    assert kept != burst and all(21.5 <= x <= 21.9 for block in kept for x in block)
    assert len(kept) == len(burst) and all(len(block) == 4 for block in kept)

    # A quiet first timing is kept as it is, the library not called again.
    calls.clear()
    quiet = [[21.3, 20.8, 21.9, 22.4], [21.0, 21.6, 20.9, 22.1], [21.4, 21.2, 23.0, 21.8]]
    assert validation._undisturbed(quiet_call, quiet, per_block=4) is quiet
    assert not calls

    # Re-timings that stay slower than the first leave it, after RETIMES tries.
    def busy_call() -> float:
        calls.append(90.0 if len(calls) % 2 else 30.0)
        return calls[-1]

    assert validation._undisturbed(busy_call, burst, per_block=4) is burst
    assert len(calls) == validation.RETIMES * (len(burst) * 4 + 1)  # each with one warm-up call


def test_a_timing_stopped_early_still_times_the_tuned_library_for_the_runs_asked():
    # Four interleaved blocks of 4 decided the verdict (a microsecond untuned build on a slow minute
    # outlasts the size of its blocks); the tuned side is timed alone for the 20 runs asked.
    from foundation.runtime import validation

    calls = []

    def tuned_call() -> float:
        calls.append(1)
        return 12.5

    stopped = [[12.0] * 4] * 4
    topped = validation._with_runs_asked(tuned_call, stopped, per_block=4, runs=20)
    assert topped[:4] == stopped and topped[4:] == [[12.5] * 4] and len(calls) == 4
    # Whole blocks: the runs asked are reached, not cut to the run.
    assert sum(map(len, validation._with_runs_asked(tuned_call, stopped, per_block=3, runs=20))) == 22
    assert len(calls) == 4 + 6
    # Every block timed: nothing added.
    whole = [[12.0] * 4] * 5
    assert validation._with_runs_asked(tuned_call, whole, per_block=4, runs=20) == whole and len(calls) == 10
