"""Which of a job's tasks its library compiles untuned, kept with the job for its summary, status and `--json`.

A task is built untuned when its fastest record is its untuned form (measured first by every tuning
run on CPUs, foundation.meta_schedule.untuned_form: no tuned schedule beat it) or when it has no
valid record. Both modes keep the finding in the job's notes (JobNotes.built_untuned) as
``{"tasks": [names], "of": number of tasks}``, written when the library is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from foundation.models.loaded import LoadedModel
    from foundation.registry.store import RegistryStore

def built_untuned(tasks: Sequence[Any], database) -> dict:
    """The job's note for a library built from ``database``'s best records of ``tasks``."""
    from foundation.meta_schedule.untuned_form import tasks_built_untuned

    return {"tasks": tasks_built_untuned(tasks, database), "of": len(tasks)}


def built_untuned_from_registry(store: "RegistryStore", loaded: "LoadedModel", target_json: str,
                                fingerprint_id: str, tvm_version: str, software: dict, *,
                                prepack: bool = False, block_activations: bool = False) -> dict:
    """`built_untuned` for a build the coordinator made from the registry (it keeps no task list
    of its own at build time: the tasks are extracted again, as the build lowers them)."""
    import json

    from foundation.compile import extract_tuning_tasks
    from foundation.hardware.targets import to_tvm_target
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.meta_schedule.database.registry_database import tvm_database_for

    target_doc = json.loads(target_json)
    install_lean_tensor_intrinsics(target_doc["kind"])
    target = to_tvm_target(target_doc)
    tasks = extract_tuning_tasks(loaded, target, prepack=prepack, block_activations=block_activations)
    return built_untuned(tasks, tvm_database_for(store, fingerprint_id, target_json, tvm_version, software))


def describe_built_untuned(value: Mapping[str, Any] | None) -> str | None:
    """One line for the summary; None when every task was built tuned (or nothing is known)."""
    if not value or not value.get("tasks"):
        return None
    names = list(value["tasks"])
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return (f"{len(names)} of {value.get('of', '?')} tasks built untuned (their untuned form timed fastest, "
            f"or they have no record): {shown}")
