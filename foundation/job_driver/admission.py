"""A submit's admission, the same in both modes: answered from the registry by a library it holds, or the model's
row and a queued job for the recipe (foundation.job_driver.pipeline) to take on.

Each mode finds the library its own way (the embedded farm may wait for another submit of the scope, a
coordinator asks for each fingerprint of its agents), and writes its job row where it keeps jobs (the
registry's, with this process as its runner; the cluster store's, which may attach the submit to a job
running already); what a hit, a model row and a new job hold is written here once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from foundation.domain.job_spec import JobNotes, JobSpec, stored_options
from foundation.domain.weights_layout import AUTO, LayoutChoice, WeightsLayout
from foundation.job_driver.artifacts import hit_form_why, record_hit

if TYPE_CHECKING:  # pragma: no cover
    from foundation.models.loaded import LoadedModel
    from foundation.models.model_key import ModelKey
    from foundation.registry.entities import Artifact, Job, Model
    from foundation.registry.store import RegistryStore

# A new job's status line until its plan step takes it.
QUEUED = "queued: extracting tuning tasks"


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
