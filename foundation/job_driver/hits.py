"""A registry hit, the same in both modes: where a model's library may be found for this box, the library found
there (verified before it is given), and the job it answers.

A library is stored under the fingerprint and target it was tuned for. A box of the same hardware at another
size (foundation.domain.compatible_fingerprints) runs it correctly: the target's num-cores only shaped how the
schedules split work, and the runtime's thread pool takes this box's cores. So `farm run`, `farm.load` and a
submit's hit lookup try this fingerprint's scope first and then each compatible fingerprint's, nearest in size
first; a library found there says whose it is (``Artifact.fingerprint_id``), and a `--retune` here stores one of
this fingerprint's that is found first from then on.

In a scope, the newest validated artifact of each form of weights asked for is verified before it is given: one
whose stored bytes no longer match its sha256, or are no library a loader could map, is marked invalid (with
why) and is never a hit again, and the next older valid artifact, if any, answers instead. Both modes answer a
hit in exactly this way, or a library tuned by one would not be found (or would be described differently) by
the other.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from foundation.clock import utc_now
from foundation.domain.compatible_fingerprints import compatible, compatible_first
from foundation.domain.job_spec import JobNotes, JobSpec, job_options, stored_options
from foundation.domain.jobs import JobState
from foundation.domain.weights_layout import AUTO, LayoutChoice, WeightsLayout
from foundation.errors import BadInput, NotFound, RegistryError
from foundation.hardware.targets import target_json as spelled
from foundation.job_driver.artifacts import LIBRARY_FORMAT
from foundation.job_driver.library_file import shared_library_problem, tvm_library_problem
from foundation.models.model_key import ModelKey
from foundation.units import milliseconds

if TYPE_CHECKING:  # pragma: no cover
    from foundation.registry.entities import Artifact, Job
    from foundation.registry.store import RegistryStore

logger = logging.getLogger("farm.job")


@dataclass(frozen=True)
class LibraryScope:
    """One (fingerprint, target) under which a library for this box may be stored."""

    fingerprint_id: str
    target_json: str

    def is_own(self, fingerprint_id: str) -> bool:
        return self.fingerprint_id == fingerprint_id


def library_scopes(store: "RegistryStore", target_json: str, fingerprint_id: str,
                   details: dict[str, Any], *, chosen: str | None = None,
                   known: dict[str, dict[str, Any]] | None = None) -> list[LibraryScope]:
    """This fingerprint's scope, then its compatible fingerprints' (nearest size first); only
    ``chosen``'s where one is named (``--fingerprint``), refused unless it is this hardware.
    ``known``: the registry's fingerprints (id -> details), where the caller has read them already."""
    if known is None:
        known = {f.id: f.details for f in store.list_fingerprints()}
    if chosen is not None:
        if chosen == fingerprint_id:
            return [LibraryScope(fingerprint_id, target_json)]
        if chosen not in known:
            raise NotFound(f"no fingerprint {_shown(chosen)} in the registry",
                           "`farm registry ls` lists the fingerprints it holds")
        if not compatible(details, known[chosen]):
            raise BadInput(f"fingerprint {_shown(chosen)} is other hardware than this box's ({fingerprint_id}): "
                           f"its libraries may not run here",
                           "name a fingerprint of this CPU at another size, or leave --fingerprint out")
        return [LibraryScope(chosen, _target_for(target_json, details, known[chosen]))]
    others = compatible_first(fingerprint_id, details, known)
    return [LibraryScope(fingerprint_id, target_json)] + [
        LibraryScope(fp, _target_for(target_json, details, known[fp])) for fp in others
    ]


def _target_for(target_json: str, own: dict[str, Any], other: dict[str, Any]) -> str:
    """``target_json`` as the farm spelled it for ``other``: the num-cores it filled in from the
    fingerprint becomes the other's; one the user set stays (it was never this box's size)."""
    target = json.loads(target_json)
    if target.get("kind") == "llvm" and target.get("num-cores") == own.get("cores") and other.get("cores"):
        target["num-cores"] = int(other["cores"])
    return spelled(target)


@dataclass(frozen=True)
class HitLookup:
    """What looking for a hit found: the artifact to answer with, and those found corrupt on the way."""

    artifact: "Artifact | None"
    invalidated: list["Artifact"] = field(default_factory=list)


def look_up_hit(
    store: "RegistryStore", key: ModelKey, target_json: str, fingerprint_id: str, tvm_version: str,
    weights_layout: WeightsLayout,
) -> HitLookup:
    """The newest validated, intact artifact for this model, target, fingerprint, TVM version and form of
    weights (an artifact of the other form was tuned on other TIR: not a hit), and those it found corrupt and
    marked invalid on the way.

    Looked up by the model's name, batch and source digest, so no TVM import is needed.
    """
    model = store.find_model(key.name, key.batch, key.source_digest)
    invalidated: list[Artifact] = []
    if model is None:
        return HitLookup(None)
    while True:
        artifact = store.find_artifact(model.id, target_json, fingerprint_id, tvm_version,
                                       WeightsLayout(weights_layout).value)
        if artifact is None:
            return HitLookup(None, invalidated)
        problem = library_problem(artifact, store.get_artifact_library(artifact.id))
        if problem is None:
            return HitLookup(artifact, invalidated)
        logger.warning("artifact %s is corrupt (%s): marked invalid", artifact.id, problem)
        invalidated.append(store.invalidate_artifact(artifact.id, problem))


def look_up_fastest_hit(
    store: "RegistryStore", key: ModelKey, target_json: str, fingerprint_id: str, tvm_version: str,
    forms: "Sequence[WeightsLayout]",
) -> HitLookup:
    """`look_up_hit` over several forms of weights (what an `auto` submit may be answered by): of each
    form's newest intact artifact, the one with the lowest stored median latency."""
    found: list[Artifact] = []
    invalidated: list[Artifact] = []
    for form in forms:
        lookup = look_up_hit(store, key, target_json, fingerprint_id, tvm_version, form)
        invalidated.extend(lookup.invalidated)
        if lookup.artifact is not None:
            found.append(lookup.artifact)
    fastest = min(found, key=lambda a: a.latency_median_ms or a.latency_mean_ms, default=None)
    return HitLookup(fastest, invalidated)


def library_problem(artifact: "Artifact", library: bytes) -> str | None:
    """What is wrong with an artifact's stored bytes, or None if they are the ones validated and a
    loader could map them and TVM load. A hit must load: bytes replaced together with their size and
    sha256 match, and are still no library, or another program's."""
    digest = hashlib.sha256(library).hexdigest()
    if digest != artifact.sha256:
        return (f"its stored library ({len(library)} bytes, sha256 {digest[:12]}…) does not match "
                f"the one validated ({artifact.size} bytes, sha256 {artifact.sha256[:12]}…)")
    unloadable = None
    if artifact.lib_format == LIBRARY_FORMAT:
        unloadable = shared_library_problem(library) or tvm_library_problem(library)
    if unloadable is not None:
        return f"its stored library ({len(library)} bytes) cannot be loaded: {unloadable}"
    return None


@dataclass(frozen=True)
class ScopedHit:
    """What looking through the library scopes found: the first scope's library, and the corrupt ones marked
    invalid on the way."""

    artifact: "Artifact | None"
    scope: "LibraryScope | None" = None
    invalidated: list["Artifact"] = field(default_factory=list)


def first_hit(store: "RegistryStore", key: "ModelKey", scopes: "Sequence[LibraryScope]", tvm_version: str,
              forms: Sequence[WeightsLayout]) -> ScopedHit:
    """The library answering ``key`` from the first scope that holds one (this fingerprint's, then compatible
    ones': library_scopes), the fastest of ``forms`` there."""
    invalidated: list[Artifact] = []
    for scope in scopes:
        lookup = look_up_fastest_hit(store, key, scope.target_json, scope.fingerprint_id, tvm_version, forms)
        invalidated.extend(lookup.invalidated)
        if lookup.artifact is not None:
            return ScopedHit(lookup.artifact, scope, invalidated)
    return ScopedHit(None, None, invalidated)


def hit_choice(hit: "Artifact", spec: JobSpec, layout: WeightsLayout) -> LayoutChoice:
    """The form a hit answers in, and why: the fastest form for `auto`, else the one asked for."""
    form = WeightsLayout(hit.weights_layout)
    why = (hit_form_why(hit, layout) if spec.weights_layout == AUTO
           else f"asked for with --weights-layout {spec.weights_layout}")
    return LayoutChoice(form, why)


def answered_by(store: "RegistryStore", hit: "Artifact", spec: JobSpec, layout: WeightsLayout, target_json: str,
                fingerprint_id: str) -> tuple["Job", LayoutChoice]:
    """The job a hit answers, recorded succeeded, tuning nothing, its notes saying which form and why (the
    choice, returned too), and what the library was tuned with where that is less than was asked for."""
    choice = hit_choice(hit, spec, layout)
    short = tuned_short_of(store, hit, spec)
    if short is not None:
        choice = replace(choice, why=f"{choice.why}; {short}")
    job = record_hit(store, hit, target_json, fingerprint_id, stored_options(spec, JobNotes(choice.chosen, choice)))
    return job, choice


def tuned_short_of(store: "RegistryStore", hit: "Artifact", spec: JobSpec) -> str | None:
    """What ``hit``'s library was tuned with, said where a submit's --trials or --trials-per-task asks for more
    (a hit answers whatever the budget: a submit asking for more would otherwise get fewer trials than it named
    without a word); None when it asks for no budget, or no more, or the tuning job is not in this registry."""
    if (spec.trials is None and spec.trials_per_task is None) or not hit.job_id:
        return None
    try:
        tuned = store.get_job(hit.job_id)
        plan = job_options(tuned).notes.trial_plan
    except (NotFound, RegistryError):
        return None
    short = []
    if spec.trials is not None and spec.trials > tuned.trials_done:
        short.append(f"{spec.trials} trials")
    if spec.trials_per_task is not None and plan is not None and spec.trials_per_task > plan.per_task_cap:
        short.append(f"{spec.trials_per_task} a task")
    if not short:
        return None
    cap = f" (at most {plan.per_task_cap} a task)" if plan is not None else ""
    return (f"it was tuned with {tuned.trials_done} trials{cap}, fewer than the {' and '.join(short)} asked for: "
            f"`--retune` tunes on from its records")


def hit_form_why(artifact: "Artifact", default: WeightsLayout) -> str:
    """Why an `auto` submit was answered by ``artifact``'s form (LayoutChoice.why)."""
    if artifact.weights_layout == default.value:
        return "the fastest library the registry holds for this model, in auto's default form"
    return (f"the fastest library the registry holds for this model "
            f"({milliseconds(artifact.latency_median_ms)} median) is of the {artifact.weights_layout} form, "
            f"not auto's default {default.value}")


def record_hit(
    store: "RegistryStore",
    artifact: "Artifact",
    target_json: str,
    fingerprint_id: str,
    options: dict[str, Any],
) -> "Job":
    """A job answered from the registry: succeeded at once, pointing at ``artifact``."""
    job = store.create_job(
        model_id=artifact.model_id, target=target_json, fingerprint_id=fingerprint_id,
        trials_budget=0, options=options, cache_hit=True, state=JobState.SUCCEEDED,
    )
    return store.update_job(job.id, artifact_id=artifact.id, finished_at=utc_now())


def _shown(value: str, limit: int = 80) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")
