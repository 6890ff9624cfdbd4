"""When a job's measurements mean it failed: nearly all candidates, or a dominant task's all."""

from __future__ import annotations

from foundation.domain.measurements import TaskOutcome, measurements_failed


def task(name, trials, errors, weight=1, flop=1e6, first_error=None):
    return TaskOutcome(name, weight, flop, trials, errors, first_error)


def test_a_few_failures_are_normal():
    assert measurements_failed([task("a", 16, 2), task("b", 16, 14)]) is None
    assert measurements_failed([]) is None
    assert measurements_failed([task("a", 0, 0)]) is None  # never measured: runs untuned, not a failure


def test_nearly_all_failing_fails_the_job():
    reason = measurements_failed([task("a", 16, 15, first_error="Illegal instruction"), task("b", 16, 15)])
    assert reason.startswith("30 of 32 measured candidates failed (more than 90%)")
    assert "first error: Illegal instruction" in reason


def test_a_dominant_task_with_no_valid_candidate_fails_the_job():
    reason = measurements_failed([task("conv", 8, 8, flop=9e6), task("add", 64, 0, flop=1e6)])
    assert reason == "all 8 measured candidates of task conv, 90% of the model's work, failed"
    # A small task with none valid is not enough: it runs untuned.
    assert measurements_failed([task("conv", 64, 0, flop=9e6), task("add", 8, 8, flop=1e6)]) is None


def test_candidates_failed_by_the_box_running_out_name_the_limit_not_the_target():
    for first_error, named in [("[Errno 24] Too many open files: '/dev/null'", "open files (`ulimit -n`)"),
                               ("BlockingIOError: [Errno 11] Resource temporarily unavailable",
                                "processes or threads (`ulimit -u`)"),
                               ("OSError: [Errno 28] No space left on device", "disk space")]:
        reason = measurements_failed([task("a", 4, 4, first_error=first_error)])
        assert f"this box seems to have run out of {named}" in reason and "target may not match" not in reason, reason
