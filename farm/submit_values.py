"""What an embedded submit takes and returns, and what its caller is told while it runs."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Protocol

from foundation.domain.job_spec import EMBEDDED, JobSpec, job_notes
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.submission import Submission
from foundation.domain.weights_layout import LayoutChoice, WeightsLayout
from foundation.job_driver.artifacts import artifact_json
from foundation.meta_schedule.measure import MeasureSettings
from foundation.meta_schedule.progress import ProgressListener
from foundation.meta_schedule.tuner import TuningReport
from foundation.meta_schedule.warm.job_start import warm_start_json
from foundation.models.model_key import ModelKey

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.reuse import ReusePlan
    from foundation.domain.trial_plan import TrialPlan
    from foundation.registry.entities import Artifact, Job


class JobObserver(ProgressListener, Protocol):
    """What a caller of `submit` is told: stage changes plus per-task tuning progress."""

    def stage(self, state: str, detail: str) -> None: ...

    def planned(self, plan: dict) -> None:
        """The trial plan (TrialPlan.to_json), before tuning starts."""

    # Optional: `job_started(job_id)`, called once the tuning job's row exists (farm.submit_handle).


@dataclass(frozen=True)
class SubmitRequest(Submission):
    """A Submission run embedded: here, on ``registry`` (None: the farm's own), measured as ``measure`` says.

    It is a Submission, not one that holds one, so that what the job reads of it (``request.trials``)
    is the same attribute in both modes. ``model`` may also be a model already keyed here (in memory:
    farm.model_sources); ``fingerprint`` names a compatible one (this CPU at another size) whose
    library answers; None: this box's, else the nearest compatible one's
    (foundation.job_driver.hits).
    """

    model: str | ModelKey
    registry: str | None = None
    measure: MeasureSettings = field(default_factory=MeasureSettings)

    @staticmethod
    def of(submission: Submission, *, registry: str | None = None, model: str | ModelKey | None = None,
           measure: MeasureSettings | None = None) -> "SubmitRequest":
        """``submission`` to be run here (``model``: the model keyed here, in its place)."""
        asked = {f.name: getattr(submission, f.name) for f in fields(Submission)}
        if model is not None:
            asked["model"] = model
        return SubmitRequest(**asked, registry=registry, measure=measure or MeasureSettings())

    def job_spec(self, mode: str = EMBEDDED) -> JobSpec:
        return super().job_spec(mode)


@dataclass
class SubmitResult:
    job: "Job"
    cache_hit: bool
    fingerprint: str
    model: ModelKey
    target: str
    artifact: "Artifact | None"
    weights_layout: WeightsLayout
    report: TuningReport | None = None
    seconds: float = 0.0
    reuse: "ReusePlan | None" = None
    plan: "TrialPlan | None" = None
    until: RoundsOutcome | None = None
    layout_choice: LayoutChoice | None = None  # which form and why (auto may leave its default)

    def to_json(self) -> dict:
        """The job's document (as `farm status --json` prints it), with what this submit adds and knows
        first-hand: its tasks, timings and reuse."""
        from farm.registry_jobs import job_document

        out = {
            **job_document(self.job, self.model.name, self.model.batch, self.artifact),
            "job": self.job.id,
            "state": self.job.state,
            "cache_hit": self.cache_hit,
            "trials": self.report.trials if self.report else self.job.trials_done,
            "fingerprint": self.fingerprint,
            "model": self.model.name,
            "batch": self.model.batch,
            "target": self.target,
            "weights_layout": self.weights_layout.value,
            "weights_layout_choice": self.layout_choice.to_json() if self.layout_choice else None,
            "error": self.job.error,
            "seconds": round(self.seconds, 3),
            "artifact": artifact_json(self.artifact) if self.artifact else None,
            "built_untuned": built.to_json() if (built := job_notes(self.job).built_untuned) else None,
        }
        if self.artifact:  # loud: the tuned library timed slower than the untuned build (which was then kept)
            out["slower_than_untuned"] = out["artifact"]["slower_than_untuned"]
        if self.plan:
            out["trial_plan"] = self.plan.to_json()
        if self.until:
            out["until"] = self.until.to_json()
        if self.report:
            out["tasks"] = [t.to_json() for t in self.report.tasks]
            out["measure_errors"] = self.report.errors
            out["tuning_seconds"] = round(self.report.seconds, 3)
            out["first_build_at"] = self.report.first_build_at
            out["warm_start"] = warm_start_json(self.report)
        if self.reuse:
            out["reuse"] = {**self.reuse.summary().to_json(), "per_task": [t.to_json() for t in self.reuse.tasks]}
        return out
