"""The embedded job's verdicts with real tuning: a job whose candidates nearly all fail does not succeed."""

from __future__ import annotations

import pytest

from farm.embedded import submit
from farm.submit_values import SubmitRequest
from foundation.meta_schedule.measure import MeasureSettings

pytestmark = pytest.mark.slow


def test_a_job_whose_candidates_all_fail_is_failed_and_commits_nothing(tmp_path):
    # Every build times out (its worker is killed): real MetaSchedule failures, the same each run.
    # (SQLite only: the job's moves are tested on both databases in foundation/job_driver.)
    request = SubmitRequest(model="mlp-tiny", target="llvm", batch=1, registry=f"sqlite:///{tmp_path / 'r.db'}",
                            trials=8,
                            trials_per_task=4, measure=MeasureSettings(build_timeout_sec=1e-3), validation_runs=1)
    result = submit(request)
    assert result.job.state == "failed", result.job
    assert result.job.error.startswith("8 of 8 measured candidates failed (more than 90%)"), result.job.error
    assert result.artifact is None and result.report.errors == 8
    assert result.job.status == "failed: its candidates failed"
