"""Keep with a distributed job which tasks its library compiled untuned, as the embedded mode does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from foundation.domain.job_spec import job_notes, noted
from foundation.job_driver.built_untuned import built_untuned_from_registry

if TYPE_CHECKING:  # pragma: no cover
    from foundation.models.loaded import LoadedModel
    from foundation.registry.store import RegistryStore


def note_built_untuned(store: "RegistryStore", job_id: str, loaded: "LoadedModel", tvm_version: str) -> None:
    """Note (JobNotes.built_untuned) for the library just built from the registry's best records
    (foundation.job_driver.built_untuned); `farm status` and the client's `--json` show it."""
    from coordinator.tvm_ir_lock import TVM_IR_LOCK
    from foundation.hardware.versions import software_versions

    job = store.get_job(job_id)
    form = job_notes(job).weights_layout
    with TVM_IR_LOCK:  # the coordinator's threads share TVM's IR
        found = built_untuned_from_registry(store, loaded, job.target, job.fingerprint_id, tvm_version,
                                            software_versions(job.target_kind), prepack=form.prepacks,
                                            block_activations=form.blocks_activations)
    store.update_job(job_id, options=noted(store.get_job(job_id), built_untuned=found))
