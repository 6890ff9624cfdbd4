"""A job's steps, one set of functions for both modes: plan, seeds, (tune), build, validate, commit.

    plan ──► seeds ──► tune ──► build ──► validate ──► commit
    (plan)   (seeds)   (each    (build)   (validate, or an agent   (commit)
                       mode's)            with validation_settings;
                                          reported_check reads its report)

farm.embedded runs them in-process, one after the other, tuning here (its seeds measured first, with the
fingerprint's cost model). The coordinator runs `plan`, `seeds` and `build` on its background worker, keeps
each task's seeds as record ids for the shards that tune it, spreads the tuning over agents as shards,
hands the validation to an agent of the job's fingerprint (the same check, foundation.runtime.validation,
with `validation_settings`), reads the agent's report back as the check `validate` makes
(`reported_check`) and runs `commit`. A job tuned in rounds (`--until`) plans its tasks and budget here
and runs the rounds loop (foundation.job_driver.rounds_loop), which plans each round's trials afresh and
judges each round's model built by `tuned_library`. Each step reads the job's
spec and notes (foundation.domain.job_spec); the moves between steps, guarded by the state a job was
last seen in, stay with each mode's JobDriver (foundation.job_driver.driver), as do the verdicts there.

Callers call these through the module (`steps.build(...)`), so that a step is one function both
modes run (tests/test_steps_both_modes.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from foundation import config
from foundation.domain.job_spec import JobSpec, job_notes
from foundation.job_driver.artifacts import commit_artifact
from foundation.job_driver.driver import KeptLibrary, library_to_keep, validation_failure

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.compile import TuningTask
    from foundation.domain.weights_layout import LayoutChoice, WeightsLayout
    from foundation.meta_schedule.reuse import ReusedTuning
    from foundation.meta_schedule.tuner import TuningBudget
    from foundation.meta_schedule.warm import SeedTrace
    from foundation.models.loaded import LoadedModel
    from foundation.registry.entities import Artifact, Job
    from foundation.registry.store import RegistryStore
    from foundation.runtime.validation import LibraryCheck

VALIDATION_WARMUP = 3


@dataclass(frozen=True)
class Planned:
    """What a job's plan step makes."""

    tasks: list["TuningTask"]  # every task of the model, in the form the job tunes
    form: "WeightsLayout"
    choice: "LayoutChoice | None"  # which form and why; None: the job's form was chosen before
    budget: "TuningBudget"
    reused: "ReusedTuning | None"  # what it tunes, tops up and skips; None: tuned in rounds, planned per round


def plan(loaded: "LoadedModel", target: "tvm.target.Target", database: Any, spec: JobSpec,
         form: "WeightsLayout") -> Planned:
    """Extract the model's tuning tasks in the form the spec asks for (auto: the form the registry covers
    best, foundation.meta_schedule.layout_choice), give them the spec's budget and, unless the job is
    tuned in rounds, decide what the registry's records spare it (foundation.meta_schedule.reuse).
    With no form asked for (``spec.weights_layout`` None: chosen already, or a job from before the
    choice was kept) the tasks are ``form``'s."""
    from foundation.compile import extract_tuning_tasks
    from foundation.domain.trial_phases import first_phase
    from foundation.meta_schedule.layout_choice import choose_layout
    from foundation.meta_schedule.reuse import decide_reuse
    from foundation.meta_schedule.tuner import TuningBudget

    choice = None
    if spec.weights_layout is not None:
        chosen = choose_layout(loaded, target, spec.weights_layout, database)
        tasks, choice, form = chosen.tasks, chosen.choice, chosen.choice.chosen
    else:
        tasks = extract_tuning_tasks(loaded, target, prepack=form.prepacks, block_activations=form.blocks_activations)
    # Two phases (config.phased_plan): the plan's trials are the whole budget's, with a first phase marked
    # in them; the embedded tuner re-plans the rest once it is measured, a coordinator tunes them in one.
    # Tuning in rounds re-plans every round already.
    phased = config.phased_plan() and spec.until is None
    budget = TuningBudget.for_tasks(len(tasks), spec.trials, spec.trials_per_task, phased=phased)
    reused = decide_reuse(tasks, database, spec.reuse, budget) if spec.until is None else None
    if phased and reused is not None:
        reused = replace(reused, trial_plan=first_phase(reused.trial_plan))
    return Planned(tasks, form, choice, budget, reused)


@dataclass(frozen=True)
class Seeds:
    """What a job's seeds step makes: the warm start's donor traces for the tasks it tunes."""

    traces: list[list["SeedTrace"]]  # per task, best first
    per_task: int  # how many seeds a task may measure; 0: no warm start


def seeds(store: "RegistryStore", fingerprint_id: str, target_json: str, tvm_version: str, spec: JobSpec,
          tasks: Sequence["TuningTask"], planned: Sequence[int]) -> Seeds:
    """Donor traces for each of ``tasks`` from the registry, similar workloads of this fingerprint's first,
    then of the nearest others' (foundation.meta_schedule.warm.find_seed_traces): as many as the task
    planned the most trials may measure (``planned``: each task's trials; the tuner holds every task to
    its own). No seeds when the spec asks for no warm start or nothing is tuned."""
    from foundation.meta_schedule.warm import find_seed_traces, seeds_per_task

    if not spec.warm_start or not tasks:
        return Seeds([[] for _ in tasks], 0)
    wanted = seeds_per_task(max(planned, default=0))
    return Seeds(find_seed_traces(store, fingerprint_id, target_json, tvm_version, tasks, wanted), wanted)


@dataclass(frozen=True)
class Built:
    """What a job's build step makes."""

    library: bytes  # built with the registry's best records, in the form the job tuned
    reference: bytes  # the untuned build, plain weights: what the library is checked and timed against


def build(loaded: "LoadedModel", target: "tvm.target.Target", database: Any, form: "WeightsLayout", *,
          library: bytes | None = None, reference: bytes | None = None) -> Built:
    """The job's library with the best records of ``database``, and the untuned reference; ``library``
    or ``reference`` when built already (tuning in rounds builds the last round's library, a goal of
    onnxruntime the untuned build)."""
    from foundation.compile import build_library

    if library is None:
        library = tuned_library(loaded, target, database, form)
    if reference is None:
        reference = build_library(loaded, target, None)
    return Built(library, reference)


def tuned_library(loaded: "LoadedModel", target: "tvm.target.Target", database: Any, form: "WeightsLayout") -> bytes:
    """The model built with the best records of ``database``, in the form the job tunes: what `build`
    commits, and what each round of a job tuned in rounds is judged on."""
    from foundation.compile import build_library

    return build_library(loaded, target, database, prepack=form.prepacks, block_activations=form.blocks_activations)


@dataclass(frozen=True)
class ValidationSettings:
    """What the validation runs with, wherever it runs."""

    seed: int  # of the inputs and weights
    runs: int
    warmup: int = VALIDATION_WARMUP


def validation_settings(spec: JobSpec) -> ValidationSettings:
    return ValidationSettings(spec.seed, spec.validation_runs)


def validate(built: Built, target_kind: str, loaded: "LoadedModel", spec: JobSpec) -> "LibraryCheck":
    """The library's outputs against the reference's, and both timed interleaved, here."""
    from foundation.runtime.validation import check_library

    settings = validation_settings(spec)
    return check_library(built.library, built.reference, target_kind, loaded.make_inputs(settings.seed),
                         loaded.make_weights(settings.seed), runs=settings.runs, warmup=settings.warmup)


def reported_check(result: dict[str, Any]) -> "LibraryCheck":
    """An agent's validation report (the validation's stored result) as the check `validate` makes; the
    speed against the untuned build is judged from the two medians the agent timed interleaved."""
    from foundation.domain.untuned_speed import BLOCKS, SpeedCheck
    from foundation.runtime.library_runner import Latency
    from foundation.runtime.validation import LibraryCheck, ValidationResult

    validation = ValidationResult(**{k: v for k, v in result["validation"].items() if k != "rule"})
    latency = Latency(**result["latency"])
    untuned = Latency(**result["untuned_latency"]) if result.get("untuned_latency") else None
    speed = (SpeedCheck(latency.median_ms, untuned.median_ms, latency.runs, untuned.runs, BLOCKS)
             if untuned is not None and untuned.runs > 0 else None)
    return LibraryCheck(validation, latency, untuned, speed)


def failed_validation(check: "LibraryCheck") -> str | None:
    """Why the job fails on this check (wrong outputs), or None."""
    return validation_failure(check.validation)


@dataclass(frozen=True)
class Committed:
    kept: KeptLibrary  # which library, its latency and the job's status line
    artifact: "Artifact"
    new: bool  # False: ``artifact`` was committed before (a coordinator restarted after committing)


def commit(store: "RegistryStore", job: "Job", check: "LibraryCheck", library_of: Callable[[bool], bytes], *,
           tvm_version: str, software: dict, committed: "Artifact | None" = None) -> Committed:
    """Keep the tuned library, or the untuned build when the tuned one timed slower
    (foundation.job_driver.driver.library_to_keep), and commit it as the job's artifact.

    ``library_of(untuned)`` gives the tuned library's bytes, or with True the untuned build's, once
    the choice is made (the coordinator reads them from the validation then); ``committed`` is the
    job's artifact if it was committed already, which is kept."""
    kept = library_to_keep(check.latency, job_notes(job).weights_layout, check.untuned_latency, check.speed,
                           fallback=not config.keep_slower_tuned())
    if committed is not None:
        return Committed(kept, committed, False)
    library = library_of(kept.untuned)
    artifact = commit_artifact(
        store, model_id=job.model_id, target_json=job.target, fingerprint_id=job.fingerprint_id, job_id=job.id,
        library=library, latency=kept.latency, untuned_latency=check.untuned_latency, validation=check.validation,
        tvm_version=tvm_version, software=software, weights_layout=kept.weights_layout, speed=kept.speed,
    )
    return Committed(kept, artifact, True)
