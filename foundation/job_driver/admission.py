"""A submit's admission, the same in both modes: what it asks narrowed to typed values, answered from the registry
by a library it holds (foundation.job_driver.hits), or the model's row and a queued job for the recipe
(foundation.job_driver.pipeline) to take on.

Each mode finds its model and fingerprints its own way (the embedded farm keys the model named here and tunes on
this box, waiting for another submit of the scope: foundation.job_driver.embedded_admission; a coordinator keys an
upload and asks for each fingerprint of its agents), and writes its job row where it keeps jobs (the registry's,
with this process as its runner; the cluster store's, which may attach the submit to a job running already). The
values asked, the forms a library may answer in, and what a model row and a new job hold are written here once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.domain.job_spec import JobNotes, JobSpec, stored_options
from foundation.domain.weights_layout import AUTO, WeightsLayout, auto_forms, weights_layout_for

if TYPE_CHECKING:  # pragma: no cover
    from foundation.models.loaded import LoadedModel
    from foundation.models.model_key import ModelKey
    from foundation.registry.entities import Model
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
