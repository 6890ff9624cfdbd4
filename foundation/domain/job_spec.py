"""A job's spec: what was asked of it, one frozen, checked value for both modes; and its notes, what it
learned as it ran. Both are kept together as the job's stored options (the registry's `jobs.options`).

The spec is made once, from `farm submit`, `farm.submit()` or a coordinator's SubmitJob request,
and read as attributes everywhere after (`job_spec(job).warm_start`). The model, target and
fingerprint are the job's own columns (`jobs.model_id`, `target`, `fingerprint_id`), not repeated here.

Stored form (`JobSpec.to_json`, `JobNotes.to_json`), one flat JSON object, `spec_version` 1:

- the spec: `mode` (embedded or distributed), `weights_layout_request` (the `--weights-layout` asked
  for: auto, plain, prepacked, prepacked-nchwc), `trials`, `trials_per_task` (None: the default
  budget), `retune`, `reuse` (a ReuseMode), `seed`, `warm_start`, `validation_runs`, `until_request`
  (UntilRequest.to_json, or None); with a goal also `until_goal`, `patience` and `round_trials`,
  copies of `until_request`'s for people reading the row (never read back);
- the notes: `weights_layout` (the form the job tunes, once chosen), `weights_layout_choice`
  (LayoutChoice: which form and why), `reused` (ReuseSummary), `trial_plan` (TrialPlan), `until`
  (RoundsOutcome: how tuning in rounds went), `warm_seeds` (WarmSeeds: the seeds planned per task),
  `warm_start_used` (WarmStartUsed: by shard), `built_untuned` (BuiltUntuned); each note stored as its
  type's `to_json` and read back by its `from_json`, strictly, with the defaults its module documents for
  older rows: a note a type cannot read is a RegistryError naming the job.

Reading is strict: a field this farm does not know, or a spec field missing from a row of
`spec_version` 1, is a RegistryError naming the job and the field. Rows written before the spec had
a version (no `spec_version`) are read with these documented defaults for what they lack: mode
embedded, weights_layout_request None (the form in the notes stands), trials and trials_per_task
None, retune false, reuse the default for retune (`default_mode`), seed 0, warm_start true,
validation_runs DEFAULT_VALIDATION_RUNS, until from `until_request` (else from `until_goal`,
`patience`, `round_trials`, else none); the notes' `weights_layout` plain. A row is written back in
the current form the next time its notes change.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol

from foundation.domain.built_untuned import BuiltUntuned
from foundation.domain.reuse import ReuseMode, ReuseSummary, default_mode
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.trial_plan import TrialPlan
from foundation.domain.tuning_rounds import DEFAULT_PATIENCE, UntilRequest, parse_goal
from foundation.domain.warm_seeds import WarmSeeds
from foundation.domain.warm_start_use import WarmStartUsed
from foundation.domain.weights_layout import REQUESTS, LayoutChoice, WeightsLayout
from foundation.errors import RegistryError

SPEC_VERSION = 1
DEFAULT_VALIDATION_RUNS = 20


class JobMode(enum.StrEnum):
    """Who runs a job: this process (`farm submit` with no coordinator), or a coordinator and its agents."""

    EMBEDDED = "embedded"
    DISTRIBUTED = "distributed"


EMBEDDED = JobMode.EMBEDDED
DISTRIBUTED = JobMode.DISTRIBUTED

_VERSION_KEY = "spec_version"
# Copies of the goal for people reading the row; written with a goal, never read back.
_GOAL_COPIES = ("until_goal", "patience", "round_trials")


class StoredJob(Protocol):
    """A job as the registry or the cluster store hands it out (an entity or a row)."""

    id: str
    options: dict


class SpecError(ValueError):
    """A spec that cannot be: a field of the wrong type or out of its range."""


@dataclass(frozen=True)
class JobSpec:
    """What a job was asked to do; checked when made (SpecError)."""

    mode: JobMode  # who runs the job (its name is taken too, and made a JobMode)
    weights_layout: str | None  # the form asked for (auto, plain, ...); None: rows from before it was kept
    trials: int | None = None  # the job's trial budget; None: the default for its tasks
    trials_per_task: int | None = None
    retune: bool = False
    reuse: ReuseMode = ReuseMode.AUTO
    seed: int = 0
    warm_start: bool = True  # seeds from similar workloads and the stored cost model
    validation_runs: int = DEFAULT_VALIDATION_RUNS
    until: UntilRequest | None = None  # tune in rounds until the model beats a goal

    def __post_init__(self) -> None:
        if self.mode not in set(JobMode):
            raise SpecError(f"mode {self.mode!r} is none of {', '.join(JobMode)}")
        object.__setattr__(self, "mode", JobMode(self.mode))
        if self.weights_layout is not None and self.weights_layout not in REQUESTS:
            raise SpecError(f"weights layout {self.weights_layout!r} is none of {', '.join(REQUESTS)}")
        for name in ("trials", "trials_per_task"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
                raise SpecError(f"{name} {value!r} is not a count of trials")
        if not isinstance(self.reuse, ReuseMode):
            raise SpecError(f"reuse {self.reuse!r} is not a ReuseMode")
        for name in ("retune", "warm_start"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"{name} {getattr(self, name)!r} is not true or false")
        if not _is_int(self.seed):
            raise SpecError(f"seed {self.seed!r} is not an integer")
        if not _is_int(self.validation_runs) or self.validation_runs < 1:
            raise SpecError(f"validation_runs {self.validation_runs!r} is not a count of runs")
        if self.until is not None and not isinstance(self.until, UntilRequest):
            raise SpecError(f"until {self.until!r} is not an UntilRequest")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            _VERSION_KEY: SPEC_VERSION,
            "mode": self.mode.value,
            "weights_layout_request": self.weights_layout,
            "trials": self.trials,
            "trials_per_task": self.trials_per_task,
            "retune": self.retune,
            "reuse": self.reuse.value,
            "seed": self.seed,
            "warm_start": self.warm_start,
            "validation_runs": self.validation_runs,
            "until_request": self.until.to_json() if self.until else None,
        }
        if self.until is not None:
            out.update(zip(_GOAL_COPIES, (self.until.goal.describe(), self.until.patience, self.until.round_trials)))
        return out


_SPEC_KEYS = ("mode", "weights_layout_request", "trials", "trials_per_task", "retune", "reuse", "seed",
              "warm_start", "validation_runs", "until_request")


@dataclass(frozen=True)
class JobNotes:
    """What a job learned as it ran, kept beside its spec; each of its own type, None until known."""

    weights_layout: WeightsLayout = WeightsLayout.PLAIN  # the form the job tunes
    weights_layout_choice: LayoutChoice | None = None  # which form and why
    reused: ReuseSummary | None = None
    trial_plan: TrialPlan | None = None  # every task's trials (a job tuned in rounds: summed over them)
    until: RoundsOutcome | None = None  # tuned in rounds: how they went so far
    warm_seeds: WarmSeeds | None = None  # the seeds planned per task (record ids), for a distributed job's shards
    warm_start_used: WarmStartUsed | None = None  # the warm start's use by shard ("embedded" for an embedded job)
    built_untuned: BuiltUntuned | None = None

    def __post_init__(self) -> None:
        for name, kind in (("weights_layout", WeightsLayout), *_TYPED_NOTES.items()):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise SpecError(f"note {name} {value!r} is not a {kind.__name__}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"weights_layout": self.weights_layout.value}
        for field in fields(self)[1:]:
            value = getattr(self, field.name)
            if value is not None:
                out[field.name] = value.to_json()
        return out

    @staticmethod
    def from_json(held: dict[str, Any]) -> "JobNotes":
        """The notes a row holds (None as absent), each read by its type's `from_json`."""
        return JobNotes(WeightsLayout(held.get("weights_layout", "plain")),
                        **{name: _read_note(name, value) for name, value in held.items() if name != "weights_layout"})


def _read_note(name: str, value: Any) -> Any:
    """One typed note read back; ValueError naming the note (a bare KeyError would name only its field)."""
    try:
        return _TYPED_NOTES[name].from_json(value)
    except KeyError as err:
        raise ValueError(f"its note {name} lacks {err}") from None
    except (ValueError, TypeError, AttributeError) as err:
        raise ValueError(f"its note {name}: {err}") from None


# The notes kept in a JSON form of their own type (its `to_json`), read back by its `from_json`.
_TYPED_NOTES: dict[str, Any] = {"weights_layout_choice": LayoutChoice, "reused": ReuseSummary,
                                "trial_plan": TrialPlan, "until": RoundsOutcome, "warm_seeds": WarmSeeds,
                                "warm_start_used": WarmStartUsed, "built_untuned": BuiltUntuned}
_NOTE_KEYS = tuple(field.name for field in fields(JobNotes))


@dataclass(frozen=True)
class JobOptions:
    """A job's spec and notes, as its options are stored."""

    spec: JobSpec
    notes: JobNotes

    def to_json(self) -> dict[str, Any]:
        return {**self.spec.to_json(), **self.notes.to_json()}

    def noted(self, **changes: Any) -> JobOptions:
        return replace(self, notes=replace(self.notes, **changes))


def stored_options(spec: JobSpec, notes: JobNotes | None = None) -> dict[str, Any]:
    """What a new job stores: its spec, and what is known of it already."""
    return JobOptions(spec, notes or JobNotes()).to_json()


def read_options(options: dict[str, Any], job_id: str | None = None) -> JobOptions:
    """A job's stored options read back; RegistryError for a field unknown or missing, or a bad value."""
    whose = f"job {job_id}" if job_id else "a job"
    unknown = sorted(set(options) - {_VERSION_KEY, *_SPEC_KEYS, *_GOAL_COPIES, *_NOTE_KEYS})
    if unknown:
        raise RegistryError(f"{whose} in the registry holds options this farm does not know: {', '.join(unknown)}",
                            "it was written by a newer tvm-farm: read it with that version")
    version = options.get(_VERSION_KEY)
    if version is None:
        values = _legacy_spec(options)
    elif version == SPEC_VERSION:
        missing = [key for key in _SPEC_KEYS if key not in options]
        if missing:
            raise RegistryError(f"{whose} in the registry lacks its spec's {', '.join(missing)}",
                                "the row was changed by hand or is damaged: submit the model again")
        values = {key: options[key] for key in _SPEC_KEYS}
    else:
        raise RegistryError(f"{whose} in the registry has a spec of version {version!r}; this farm reads "
                            f"version {SPEC_VERSION}", "read it with the tvm-farm that wrote it")
    try:
        spec = JobSpec(
            mode=values["mode"], weights_layout=values["weights_layout_request"], trials=values["trials"],
            trials_per_task=values["trials_per_task"], retune=values["retune"], reuse=ReuseMode(values["reuse"]),
            seed=values["seed"], warm_start=values["warm_start"], validation_runs=values["validation_runs"],
            until=UntilRequest.from_json(values["until_request"]) if values["until_request"] else None,
        )
        notes = JobNotes.from_json({key: options[key] for key in _NOTE_KEYS if options.get(key) is not None})
    except (SpecError, ValueError, KeyError, TypeError) as err:
        raise RegistryError(f"{whose} in the registry has options this farm cannot read: {err}",
                            "the row was changed by hand or is damaged: submit the model again") from None
    return JobOptions(spec, notes)


def _legacy_spec(options: dict[str, Any]) -> dict[str, Any]:
    """A row from before the spec had a version: what it holds (None as absent), the documented defaults
    for the rest."""
    held = {key: options[key] for key in (*_SPEC_KEYS, *_GOAL_COPIES) if options.get(key) is not None}
    values = {**_LEGACY_DEFAULTS, **held}
    values["retune"] = bool(values["retune"])
    values["reuse"] = held.get("reuse") or default_mode(values["retune"]).value
    if values["until_request"] is None and "until_goal" in held:
        values["until_request"] = UntilRequest(parse_goal(held["until_goal"]),
                                               int(held.get("patience") or DEFAULT_PATIENCE),
                                               held.get("round_trials")).to_json()
    return values


_LEGACY_DEFAULTS: dict[str, Any] = {
    "mode": EMBEDDED, "weights_layout_request": None, "trials": None, "trials_per_task": None, "retune": False,
    "reuse": None, "seed": 0, "warm_start": True, "validation_runs": DEFAULT_VALIDATION_RUNS, "until_request": None,
}


def job_options(job: StoredJob) -> JobOptions:
    return read_options(job.options, job.id)


def job_spec(job: StoredJob) -> JobSpec:
    """What ``job`` was asked to do."""
    return job_options(job).spec


def job_notes(job: StoredJob) -> JobNotes:
    """What ``job`` learned so far."""
    return job_options(job).notes


def noted(job: StoredJob, **changes: Any) -> dict[str, Any]:
    """``job``'s options with its notes changed (JobNotes' fields), to store."""
    return job_options(job).noted(**changes).to_json()


def tuned_form(options: dict[str, Any]) -> WeightsLayout:
    """The form a job tuned, from its stored options; jobs from before the choice existed tuned plain."""
    return read_options(options).notes.weights_layout


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
