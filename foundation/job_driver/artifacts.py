"""Registry hits and artifact commits: the steps the embedded and the distributed job share.

Both modes must answer a hit, and keep a validated library, in exactly the same way, or a
library tuned by one would not be found (or would be described differently) by the other.
A hit is verified before it is given: an artifact whose stored bytes no longer match its
sha256, or are no library a loader could map, is marked invalid (with why) and is never a hit
again, and the next older valid artifact, if any, answers instead.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from foundation.clock import utc_now
from foundation.domain.jobs import JobState
from foundation.domain.weights_layout import WeightsLayout
from foundation.job_driver.library_file import shared_library_problem, tvm_library_problem
from foundation.models.model_key import ModelKey
from foundation.units import milliseconds

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.untuned_speed import SpeedCheck
    from foundation.registry.entities import Artifact, Job
    from foundation.registry.store import RegistryStore
    from foundation.runtime.library_runner import Latency
    from foundation.runtime.validation import ValidationResult

logger = logging.getLogger("farm.job")

# Libraries are exported as shared objects (foundation.compile.build_library).
LIBRARY_FORMAT = "so"


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


def hit_form_why(artifact: "Artifact", default: WeightsLayout) -> str:
    """Why an `auto` submit was answered by ``artifact``'s form (LayoutChoice.why)."""
    if artifact.weights_layout == default.value:
        return "the fastest library the registry holds for this model, in auto's default form"
    return (f"the fastest library the registry holds for this model "
            f"({milliseconds(artifact.latency_median_ms)} median) is of the {artifact.weights_layout} form, "
            f"not auto's default {default.value}")


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


def commit_artifact(
    store: "RegistryStore",
    *,
    model_id: str,
    target_json: str,
    fingerprint_id: str,
    job_id: str,
    library: bytes,
    latency: "Latency",
    untuned_latency: "Latency | None",
    validation: "ValidationResult",
    tvm_version: str,
    software: dict[str, Any],
    weights_layout: WeightsLayout,
    speed: "SpeedCheck | None" = None,
) -> "Artifact":
    """Keep a library that passed validation, with its latency, the check it passed (and how it
    timed against the untuned build, in its validation's ``speed``) and the form its weights take."""
    return store.add_artifact(
        model_id=model_id, target=target_json, fingerprint_id=fingerprint_id, job_id=job_id,
        library=library, lib_format=LIBRARY_FORMAT,
        latency={"mean_ms": latency.mean_ms, "median_ms": latency.median_ms, "std_ms": latency.std_ms},
        untuned_latency_mean_ms=untuned_latency.mean_ms if untuned_latency else None,
        validation={**validation.to_json(), **({"speed": speed.to_json()} if speed else {})},
        tvm_version=tvm_version, software=software,
        weights_layout=WeightsLayout(weights_layout).value,
    )


def artifact_json(artifact: "Artifact") -> dict:
    """An artifact as `farm submit --json` (and the coordinator's clients) show it."""
    return {
        "id": artifact.id,
        "job_id": artifact.job_id,  # the job that tuned it
        "sha256": artifact.sha256,
        "size": artifact.size,
        "latency_ms": {
            "mean": artifact.latency_mean_ms,
            "median": artifact.latency_median_ms,
            "std": artifact.latency_std_ms,
        },
        "untuned_latency_ms": artifact.untuned_latency_mean_ms,
        "validation": artifact.validation,
        # Loud on purpose: a stored library slower than the untuned build, or the untuned build kept instead.
        "slower_than_untuned": bool((artifact.speed or {}).get("slower_than_untuned")),
        "speed": artifact.speed,
        "tvm_version": artifact.tvm_version,
        "weights_layout": artifact.weights_layout,
        "created_at": artifact.created_at.isoformat() if artifact.created_at else None,
    }
