"""The TVM work of a distributed job's steps on the coordinator: its plan (tasks, seeds) and its build.

Each runs the shared step (foundation.job_driver.steps) for the job's target under the TVM IR lock,
imports TVM and can take seconds to minutes, so the coordinator runs them on a BackgroundWorker
thread (coordinator.background_worker), never on a gRPC handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from coordinator.tvm_ir_lock import TVM_IR_LOCK
from foundation.job_driver import steps

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.job_spec import JobSpec
    from foundation.domain.reuse import ReusePlan
    from foundation.domain.trial_plan import TrialPlan
    from foundation.domain.weights_layout import LayoutChoice, WeightsLayout
    from foundation.job_driver.steps import Built
    from foundation.models.loaded import LoadedModel
    from foundation.registry.entities import PlannedTask
    from foundation.registry.store import RegistryStore


@dataclass(frozen=True)
class Plan:
    tasks: list["PlannedTask"]  # the tasks to tune, each with its planned trials: no task skipped or planned none
    max_trials_global: int
    max_trials_per_task: int
    reuse: "ReusePlan"
    trial_plan: "TrialPlan"  # every task's trials (a skipped task's 0): what the job shows
    # Warm-start seeds: for each of ``tasks``, the registry ids of its donor records, best first
    # (foundation.meta_schedule.warm.find_seed_traces), and how many a task may measure.
    seed_records: list[list[int]]
    max_seeds_per_task: int
    layout_choice: "LayoutChoice | None" = None  # the form planned and why, when the request let the planner choose

    def seeds_json(self) -> dict:
        """The seeds as the job keeps them (its notes' warm_seeds): record ids, not traces."""
        return {"max_per_task": self.max_seeds_per_task,
                "tasks": {t.name: ids for t, ids in zip(self.tasks, self.seed_records) if ids}}


def plan_tasks(loaded: "LoadedModel", target_json: str, spec: "JobSpec", form: "WeightsLayout", *,
               store: "RegistryStore", fingerprint_id: str, tvm_version: str) -> Plan:
    """The job's plan step (foundation.job_driver.steps.plan, the embedded mode's) for the job's target,
    under the TVM IR lock, and its shards' tasks: a task skipped, or planned no trial, is not planned;
    each task's trials (its plan's, or its top-up) are its own cap. Each planned task gets the donor records
    the job's seeds step (foundation.job_driver.steps.seeds, the embedded mode's) chose for it."""
    import json

    import tvm_ffi

    from foundation.hardware.targets import to_tvm_target
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.meta_schedule.database.registry_database import tvm_database_for, workload_json
    from foundation.registry.entities import PlannedTask

    target_doc = json.loads(target_json)
    # Task extraction imports tvm.s_tir.tensor_intrin; the full package costs ~43 s.
    install_lean_tensor_intrinsics(target_doc["kind"])
    database = tvm_database_for(store, fingerprint_id, target_json, tvm_version, {})
    with TVM_IR_LOCK:
        # Matching tasks to stored workloads parses and compares IR: under the same lock.
        planned = steps.plan(loaded, to_tvm_target(target_doc), database, spec, form)
        reused = planned.reused
        assert reused is not None, "a job tuned in rounds is planned by coordinator.job_rounds"
        tuned = [(task, trials) for task, trials in zip(reused.tasks, reused.trial_caps) if trials > 0]
        seeds = steps.seeds(store, fingerprint_id, target_json, tvm_version, spec, [t for t, _ in tuned],
                            [trials for _, trials in tuned])
    shard_tasks = [
        PlannedTask(
            name=task.name,
            weight=task.weight,
            flop=task.flop,
            workload_shash=str(tvm_ffi.structural_hash(task.mod)),
            mod_json=workload_json(task.mod),
            trials_budget=trials,
        )
        for task, trials in tuned
    ]
    return Plan(shard_tasks, reused.plan.trials, planned.budget.max_trials_per_task, reused.plan, reused.trial_plan,
                [[s.record_id for s in task_seeds] for task_seeds in seeds.traces], seeds.per_task, planned.choice)


def build_libraries(store: "RegistryStore", loaded: "LoadedModel", target_json: str, fingerprint_id: str,
                    tvm_version: str, software: dict, form: "WeightsLayout", *,
                    library: bytes | None = None) -> "Built":
    """The job's build step (foundation.job_driver.steps.build) on the coordinator: the registry's best
    records for the job's target, under the TVM IR lock; ``library`` if it was built with them already."""
    import json

    from foundation.hardware.targets import to_tvm_target
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.meta_schedule.database.registry_database import tvm_database_for

    target_doc = json.loads(target_json)
    install_lean_tensor_intrinsics(target_doc["kind"])
    target = to_tvm_target(target_doc)
    database = tvm_database_for(store, fingerprint_id, target_json, tvm_version, software)
    with TVM_IR_LOCK:
        return steps.build(loaded, target, database, form, library=library)
