"""What an embedded submit takes and returns, and what its caller is told while it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from foundation.domain.job_spec import (
    DEFAULT_VALIDATION_RUNS,
    EMBEDDED,
    JobSpec,
    SpecError,
    job_notes,
)
from foundation.domain.reuse import ReuseMode, default_mode
from foundation.domain.weights_layout import (
    AUTO,
    LayoutChoice,
    WeightsLayout,
)
from foundation.errors import BadInput
from foundation.job_driver.artifacts import (
    artifact_json,
)
from foundation.job_driver.tuning_rounds import RoundsOutcome, UntilRequest
from foundation.meta_schedule.tuner import MeasureSettings, ProgressListener, TuningReport
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


@dataclass
class SubmitRequest:
    model: str | ModelKey  # a name or path, or a model already keyed (in memory: farm.model_sources)
    target: str
    batch: int
    registry: str | None = None
    trials: int | None = None
    trials_per_task: int | None = None
    retune: bool = False
    # foundation.domain.reuse.ReuseMode; None: its default_mode (auto, or off with --retune)
    reuse: str | None = None
    seed: int = 0
    warm_start: bool = True  # seed from similar workloads and start from a trained cost model
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    validation_runs: int = DEFAULT_VALIDATION_RUNS
    weights_layout: str = AUTO  # auto, plain, prepacked or prepacked-nchwc (foundation.domain.weights_layout)
    until: UntilRequest | None = None  # tune in rounds until the model is good enough
    # A compatible fingerprint (this CPU at another size) whose library answers; None: this box's,
    # else the nearest compatible one's (foundation.job_driver.library_scopes).
    fingerprint: str | None = None

    def job_spec(self) -> JobSpec:
        """What the job is asked to do (its registry, model, target and measuring are the submit's own);
        BadInput for what cannot be."""
        try:
            reuse = ReuseMode(self.reuse) if self.reuse else default_mode(self.retune)
        except ValueError:
            raise BadInput(f"unknown reuse mode {self.reuse!r}",
                           f"use one of {', '.join(m.value for m in ReuseMode)}") from None
        try:
            return JobSpec(mode=EMBEDDED, weights_layout=self.weights_layout, trials=self.trials,
                           trials_per_task=self.trials_per_task, retune=self.retune, reuse=reuse, seed=self.seed,
                           warm_start=self.warm_start, validation_runs=self.validation_runs, until=self.until)
        except SpecError as err:
            raise BadInput(str(err)) from None


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
            "built_untuned": job_notes(self.job).built_untuned,  # tasks the library compiled untuned
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
            out["reuse"] = {**self.reuse.summary(), "per_task": [t.to_json() for t in self.reuse.tasks]}
        return out
