"""A job's JSON document: one shape whoever holds the job, the registry (an embedded job) or a coordinator.

`farm jobs`, `farm status`, `farm wait`, `farm cancel` and `farm submit` print it with --json;
farm.registry_jobs.job_document fills it from a registry's row, farm.client.job_json from a
coordinator's Job (job_document below checks both give every key), and `Job.from_document` reads
it back, once and strictly, as the typed farm.Job that the Python API returns and the CLI's views
show. What one side cannot know is null there: an embedded job has no shards (its failed_shards an
empty list) and counts no trial errors on its row; a coordinator's job has no runner process, and its
row's own fields (model_id, options, requests) stay in the coordinator's registry.

Each note is read by its own type's reader (TrialPlan, RoundsOutcome, ReuseSummary, LayoutChoice,
BuiltUntuned, SpeedCheck), so a document this version cannot read, such as a coordinator of another
version sends, is refused as a whole with one line that names the field (MalformedJob), never
half-shown. Only an older coordinator's document, from before the wire carried them, reads with defaults: a
trial plan without `per_task_cap` is capped at its budget, a latency goal's `goal_ms` of 0 is its words.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from foundation.domain.built_untuned import BuiltUntuned
from foundation.domain.jobs import JobState
from foundation.domain.json_fields import check_object, count, flag, number, text
from foundation.domain.reuse import ReuseSummary
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.trial_plan import TrialPlan
from foundation.domain.tuning_rounds import ONNXRUNTIME, parse_goal
from foundation.domain.untuned_speed import SpeedCheck
from foundation.domain.warm_start_use import SEED_COUNTS
from foundation.domain.warm_start_use import describe as describe_warm_start
from foundation.domain.weights_layout import LayoutChoice, WeightsLayout
from foundation.errors import Unreachable

KEYS = (
    "job", "state", "status", "cache_hit", "trials", "trials_budget", "trial_errors", "trial_plan",
    "fingerprint", "model", "batch", "target", "target_kind", "weights_layout", "weights_layout_choice",
    "shards", "failed_shards", "reuse", "until", "warm_start", "error", "artifact", "built_untuned",
    "runner", "heartbeat_at", "cancel_requested", "created_at", "started_at", "finished_at",
    # A registry row's names, which `farm jobs --json` printed before the document was one shape.
    "id", "model_id", "fingerprint_id", "trials_done", "options", "artifact_id", "target_request",
    "parent_request", "cancel_requested_at",
)


def job_document(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` in KEYS' order. A key left out or added is a bug in the caller, so that the two
    sides cannot drift apart unnoticed."""
    if values.keys() != set(KEYS):
        missing, extra = sorted(set(KEYS) - values.keys()), sorted(values.keys() - set(KEYS))
        raise ValueError(f"a job document lacks {missing} and has {extra} beyond farm.job_document.KEYS")
    return {key: values[key] for key in KEYS}


class MalformedJob(Unreachable):
    """A job document this version cannot read: the coordinator (or registry) that wrote it cannot be
    used from here, so it is said in one line (exit 4), not as a bug of this program."""


@dataclass(frozen=True)
class Latency:
    """A library's latency over its timed runs, in milliseconds."""

    mean_ms: float
    median_ms: float
    std_ms: float

    @staticmethod
    def from_json(value: Mapping[str, Any]) -> "Latency":
        """Its document's `latency_ms`: mean, median and std, no other field."""
        check_object(value, "latency_ms", {"mean", "median", "std"})
        return Latency(number(value["mean"], "mean"), number(value["median"], "median"),
                       number(value["std"], "std"))


@dataclass(frozen=True)
class JobArtifact:
    """The library a succeeded job stored (load it with farm.load)."""

    id: str
    sha256: str
    size: int | None
    latency: Latency
    untuned_mean_ms: float | None  # the same model built without tuning, for comparison
    validated: bool
    speed: SpeedCheck | None = None  # timed interleaved against the untuned build, when it was

    @staticmethod
    def from_json(value: Mapping[str, Any]) -> "JobArtifact":
        """A document's `artifact` (foundation.job_driver.artifacts.artifact_json, or a coordinator's)."""
        check_object(value, "artifact", None)
        size, untuned, speed = value.get("size"), value["untuned_latency_ms"], value.get("speed")
        return JobArtifact(
            id=text(value["id"], "artifact.id"), sha256=text(value["sha256"], "artifact.sha256"),
            size=count(size, "artifact.size") if size is not None else None,
            latency=Latency.from_json(value["latency_ms"]),
            untuned_mean_ms=number(untuned, "untuned_latency_ms") if untuned is not None else None,
            validated=flag((value["validation"] or {}).get("passed", False), "validation.passed"),
            speed=SpeedCheck.from_json(speed) if speed else None)


@dataclass(frozen=True)
class ShardAttempt:
    """One failed attempt of a coordinator's shard: which, on which agent, and why."""

    attempt: int
    agent: str
    reason: str


@dataclass(frozen=True)
class FailedShard:
    """A coordinator's shard that failed: its tasks and its attempts' failures."""

    shard: str
    tasks: tuple[str, ...]
    attempts: tuple[ShardAttempt, ...]

    @staticmethod
    def from_json(value: Mapping[str, Any]) -> "FailedShard":
        check_object(value, "failed_shards", {"shard", "tasks", "attempts"})
        attempts = []
        for attempt in value["attempts"]:
            check_object(attempt, "failed_shards.attempts", {"attempt", "agent", "reason"})
            attempts.append(ShardAttempt(count(attempt["attempt"], "attempt"), text(attempt["agent"], "agent"),
                                         text(attempt["reason"], "reason")))
        return FailedShard(text(value["shard"], "shard"), tuple(text(t, "task") for t in value["tasks"]),
                           tuple(attempts))


_WARM_START_TEXTS = ("cost_model_sha256", "cost_model_kind", "cost_model_note")


@dataclass(frozen=True)
class JobWarmStart:
    """What a job's searches started from, summed over them, as its document's `warm_start` holds it
    (foundation.domain.warm_start_use.job_warm_start): seeds offered and measured, and the cost model."""

    seeds_offered: int
    seeds_own_fingerprint: int
    seeds_other_fingerprints: int
    seeds_rejected: int
    seeds_failed: int
    pretrained_cost_model: bool  # every search started from a stored model
    cost_model_sha256: str  # the models' sha256, comma-separated; "" when none
    cost_model_kind: str  # xgb, xgb-cross, comma-separated; "" when none
    cost_model_note: str
    shards: int  # the searches that reported
    cost_model_start: str | None = None  # an embedded job's summary words; a coordinator sends none

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in (*SEED_COUNTS, "pretrained_cost_model", *_WARM_START_TEXTS,
                                                       "shards")}
        if self.cost_model_start is not None:
            out["cost_model_start"] = self.cost_model_start
        return out

    @staticmethod
    def from_json(value: Mapping[str, Any]) -> "JobWarmStart":
        check_object(value, "warm_start", {*SEED_COUNTS, "pretrained_cost_model", *_WARM_START_TEXTS, "shards",
                                    "cost_model_start"})
        start = value.get("cost_model_start")
        return JobWarmStart(*(count(value[name], name) for name in SEED_COUNTS),
                            pretrained_cost_model=flag(value["pretrained_cost_model"], "pretrained_cost_model"),
                            **{name: text(value[name], name) for name in _WARM_START_TEXTS},
                            shards=count(value["shards"], "shards"),
                            cost_model_start=text(start, "cost_model_start") if start is not None else None)

    def describe(self) -> str:
        """One line for people, in the words of foundation.domain.warm_start_use.describe."""
        return describe_warm_start(self.to_json())


@dataclass(frozen=True)
class Job:
    """One job as the registry or the coordinator knows it: its document, typed (``Job.from_document``)."""

    id: str
    state: JobState
    status: str  # one sentence on what it does or waits for
    model: str
    batch: int | None
    target: str
    fingerprint: str | None  # None until a coordinator's first agent of the target kind decides
    cache_hit: bool  # answered from the registry: nothing was tuned
    trials: int
    trials_budget: int
    error: str | None
    artifact: JobArtifact | None
    created_at: dt.datetime | None
    finished_at: dt.datetime | None
    target_kind: str = ""
    trial_errors: int | None = None  # a coordinator's count; an embedded job's row keeps none
    trial_plan: TrialPlan | None = None
    weights_layout: WeightsLayout | None = None
    weights_layout_choice: LayoutChoice | None = None  # which form and why
    shards: Mapping[str, int] | None = None  # a coordinator's shards by state; None embedded
    failed_shards: tuple[FailedShard, ...] = ()
    reuse: ReuseSummary | None = None
    until: RoundsOutcome | None = None  # tuned in rounds (`--until`): how they went
    warm_start: JobWarmStart | None = None
    built_untuned: BuiltUntuned | None = None
    runner: str | None = None  # the process running an embedded job
    started_at: dt.datetime | None = None
    # The whole document `farm status --json` prints, as it was read.
    document: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def done(self) -> bool:
        return self.state.is_final

    @property
    def succeeded(self) -> bool:
        return self.state is JobState.SUCCEEDED

    @staticmethod
    def from_document(doc: Mapping[str, Any]) -> "Job":
        """``doc`` (job_document's shape) read strictly; MalformedJob, naming what, if it does not read."""
        try:
            return _job(doc)
        except (KeyError, ValueError, TypeError, AttributeError) as err:
            job = doc.get("job") if isinstance(doc, Mapping) else None
            what = f"lacks {err}" if isinstance(err, KeyError) else str(err)
            raise MalformedJob(f"job {job if isinstance(job, str) else '?'}'s document does not read as this "
                               f"tvm-farm's: {type(err).__name__}: {what}",
                               "the coordinator or registry that holds it may be of another tvm-farm version: "
                               "run the same version on both") from None


def _job(doc: Mapping[str, Any]) -> Job:
    missing = [key for key in KEYS if key not in doc]
    if missing:
        raise KeyError(", ".join(missing))
    plan, choice, reuse, until = doc["trial_plan"], doc["weights_layout_choice"], doc["reuse"], doc["until"]
    warm, artifact, built, layout = doc["warm_start"], doc["artifact"], doc["built_untuned"], doc["weights_layout"]
    shards, errors, batch = doc["shards"], doc["trial_errors"], doc["batch"]
    return Job(
        id=text(doc["job"], "job"),
        state=JobState(doc["state"]),
        status=_optional_text(doc["status"], "status") or "",
        model=text(doc["model"], "model"),
        batch=count(batch, "batch") if batch is not None else None,
        target=_optional_text(doc["target"], "target") or "",
        fingerprint=_optional_text(doc["fingerprint"], "fingerprint"),
        cache_hit=flag(doc["cache_hit"], "cache_hit"),
        trials=count(doc["trials"], "trials"),
        trials_budget=count(doc["trials_budget"] or 0, "trials_budget"),
        error=_optional_text(doc["error"], "error"),
        artifact=JobArtifact.from_json(artifact) if artifact else None,
        created_at=_moment(doc["created_at"], "created_at"),
        finished_at=_moment(doc["finished_at"], "finished_at"),
        target_kind=_optional_text(doc["target_kind"], "target_kind") or "",
        trial_errors=count(errors, "trial_errors") if errors is not None else None,
        trial_plan=_trial_plan(plan) if plan else None,
        weights_layout=WeightsLayout(layout) if layout else None,
        weights_layout_choice=LayoutChoice.from_json(choice) if choice else None,
        shards={text(state, "shards"): count(n, "shards") for state, n in shards.items()} if shards else None,
        failed_shards=tuple(FailedShard.from_json(f) for f in doc["failed_shards"] or ()),
        # A coordinator's reuse is the summary; a submit's own document adds its tasks (`per_task`).
        reuse=ReuseSummary.from_json({k: v for k, v in reuse.items() if k != "per_task"}) if reuse else None,
        until=_rounds(until) if until else None,
        warm_start=JobWarmStart.from_json(warm) if warm else None,
        built_untuned=BuiltUntuned.from_json(built) if built else None,
        runner=_optional_text(doc["runner"], "runner"),
        started_at=_moment(doc["started_at"], "started_at"),
        document=dict(doc),
    )


def _trial_plan(plan: Mapping[str, Any]) -> TrialPlan:
    """A document's `trial_plan` (TrialPlan.to_json); an older coordinator's has no `per_task_cap`."""
    return TrialPlan.from_json(plan if "per_task_cap" in plan else {**plan, "per_task_cap": plan["budget"]})


def _rounds(until: Mapping[str, Any]) -> RoundsOutcome:
    """A document's `until` (RoundsOutcome.to_json); an older coordinator's latency goal has no `goal_ms`
    before the first round."""
    if until["goal_ms"] or until["goal"] == ONNXRUNTIME or until["rounds"]:
        return RoundsOutcome.from_json(dict(until))
    return RoundsOutcome.from_json({**until, "goal_ms": parse_goal(text(until["goal"], "until.goal")).latency_ms})


def _optional_text(value: Any, name: str) -> str | None:
    return None if value is None else text(value, name)


def _moment(value: Any, name: str) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(text(value, name))
