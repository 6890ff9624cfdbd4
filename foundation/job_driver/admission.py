"""A submit's admission, the same in both modes: what it asks narrowed to typed values, answered from the registry
by a library it holds, or the model's row and a queued job for the recipe (foundation.job_driver.pipeline) to take on.

Each mode finds its model and fingerprints its own way (the embedded farm keys the model named here and tunes on
this box, waiting for another submit of the scope: foundation.job_driver.embedded_admission; a coordinator keys an
upload and asks for each fingerprint of its agents), and writes its job row where it keeps jobs (the registry's,
with this process as its runner; the cluster store's, which may attach the submit to a job running already). The
values asked, the forms a library may answer in, the lookup through the library scopes, and what a hit, a model row
and a new job hold are written here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from foundation.domain.job_spec import JobNotes, JobSpec, stored_options
from foundation.domain.weights_layout import AUTO, LayoutChoice, WeightsLayout, auto_forms, weights_layout_for
from foundation.job_driver.artifacts import hit_form_why, look_up_fastest_hit, record_hit

if TYPE_CHECKING:  # pragma: no cover
    from foundation.job_driver.library_scopes import LibraryScope
    from foundation.models.loaded import LoadedModel
    from foundation.models.model_key import ModelKey
    from foundation.registry.entities import Artifact, Job, Model
    from foundation.registry.store import RegistryStore

# A new job's status line until its plan step takes it.
QUEUED = "queued: extracting tuning tasks"


@dataclass(frozen=True)
class AskedJob:
    """A submit narrowed to what its admission and its job read: the model's key, the job's spec, the form of
    weights asked for on the target's kind, and the fingerprint named to tune for or to answer (None: not named)."""

    key: "ModelKey"
    spec: JobSpec
    layout: WeightsLayout
    fingerprint: str | None = None

    def hit_forms(self, target_kind: str) -> tuple[WeightsLayout, ...]:
        """The forms a library answering it may be of: any `auto` may end in, else the one asked for."""
        return auto_forms(target_kind) if self.spec.weights_layout == AUTO else (self.layout,)


def asked_job(key: "ModelKey", spec: JobSpec, target_kind: str, fingerprint: str | None = None) -> AskedJob:
    """What a submit of ``spec`` for ``key`` asks on a target of ``target_kind``: BadInput for a form of weights
    that target cannot take, before anything is written."""
    return AskedJob(key, spec, weights_layout_for(spec.weights_layout, target_kind), fingerprint)


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
    ones': foundation.job_driver.library_scopes), the fastest of ``forms`` there."""
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
    choice, returned too)."""
    choice = hit_choice(hit, spec, layout)
    job = record_hit(store, hit, target_json, fingerprint_id, stored_options(spec, JobNotes(choice.chosen, choice)))
    return job, choice


def new_job_options(spec: JobSpec, layout: WeightsLayout) -> dict:
    """What a job the recipe takes on stores: its spec, and the form asked for (its plan step may choose
    another for `auto`, foundation.meta_schedule.layout_choice)."""
    return stored_options(spec, JobNotes(layout))


def model_row(store: "RegistryStore", key: "ModelKey", loaded: "LoadedModel") -> "Model":
    """The registry's row for the model loaded for ``key``."""
    return store.upsert_model(
        model_id=loaded.identity(), name=key.name, source=key.source, source_digest=key.source_digest,
        batch=key.batch, inputs=[s.to_json() for s in loaded.inputs],
        weights=[s.to_json() for s in loaded.weights], num_parameters=loaded.num_parameters,
    )
