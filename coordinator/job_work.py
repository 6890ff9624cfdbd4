"""The TVM work of a distributed job on the coordinator: load its model, plan its tasks, build it.

Also the fingerprint a job's canonical target is worked out on (`registered_fingerprint`).

Each step imports TVM and can take seconds to minutes, so the coordinator runs them on
`BackgroundWorker` threads, never on a gRPC handler.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.errors import InvalidRequest
from coordinator.heap import freeze_long_lived
from foundation.errors import FarmError
from foundation.hardware.fingerprint import Fingerprint
from foundation.job_driver import steps

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.job_spec import JobSpec
    from foundation.domain.reuse import ReusePlan
    from foundation.domain.trial_plan import TrialPlan
    from foundation.domain.weights_layout import LayoutChoice, WeightsLayout
    from foundation.job_driver.steps import Built
    from foundation.models.loaded import LoadedModel
    from foundation.registry.entities import Model, PlannedTask
    from foundation.registry.store import RegistryStore

logger = logging.getLogger("farm.coordinator")


def onnx_path(data_dir: Path, sha256: str) -> Path:
    """Where an uploaded ONNX file lives: keyed by content, so equal uploads are one file."""
    return data_dir / "models" / f"{sha256}.onnx"


def store_onnx(data_dir: Path, sha256: str, content: bytes) -> Path:
    path = onnx_path(data_dir, sha256)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed: a planner never reads half a file.
        partial = path.with_suffix(f".{threading.get_ident()}.partial")
        partial.write_bytes(content)
        partial.replace(path)
    return path


def registered_fingerprint(store: "RegistryStore", fp_id: str) -> Fingerprint:
    """A fingerprint the registry knows, as foundation.hardware's value (targets are worked out on it)."""
    stored = store.get_fingerprint(fp_id)
    if stored is None:
        raise InvalidRequest(f"fingerprint {fp_id!r} is not in the registry",
                             "start an agent of that fingerprint first")
    # The stored id is trusted, not recomputed (see Fingerprint.from_json).
    return Fingerprint(stored.id, stored.kind, stored.summary, dict(stored.details))


# TVM's Relax BlockBuilder keeps a process-wide stack: two threads building Relax modules at
# once (a Submit loading a new model while the planner reloads another) corrupt it and fail
# with an AssertionError (seen in bench/coordinator_scale.py). All IR work here takes this lock.
TVM_IR_LOCK = threading.RLock()


class ModelCache:
    """Loaded models by registry model id; loading a big one takes seconds, planning and
    building and validation leases all need it, so the last few are kept."""

    def __init__(self, data_dir: Path, size: int = 4):
        self._data_dir = data_dir
        self._size = size
        self._loaded: OrderedDict[str, "LoadedModel"] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, model_id: str, loaded: "LoadedModel") -> None:
        with self._lock:
            self._loaded[model_id] = loaded
            self._loaded.move_to_end(model_id)
            while len(self._loaded) > self._size:
                self._loaded.popitem(last=False)

    def get(self, model: "Model") -> "LoadedModel":
        with self._lock:
            loaded = self._loaded.get(model.id)
            if loaded is not None:
                self._loaded.move_to_end(model.id)
                return loaded
        loaded = load_stored_model(model, self._data_dir)
        self.put(model.id, loaded)
        return loaded


def load_stored_model(model: "Model", data_dir: Path) -> "LoadedModel":
    """The model a registry row describes: a zoo entry, or an ONNX file uploaded earlier."""
    from foundation.models.onnx_import import load_onnx_model
    from foundation.models.zoo import load_zoo_model

    if model.source == "onnx":
        path = onnx_path(data_dir, model.source_digest)
        if not path.is_file():
            raise FarmError(
                f"the ONNX file of model {model.name} ({model.source_digest[:12]}) is not in {path.parent}",
                "submit the file again; the coordinator's data directory lost it",
            )
        with TVM_IR_LOCK:
            return load_onnx_model(path, model.batch)
    with TVM_IR_LOCK:
        return load_zoo_model(model.name, model.batch)


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


class BackgroundWorker:
    """One daemon thread running queued jobs' steps in order, each job at most once at a time.

    Daemon, so a build in progress never holds up shutdown: a restarted coordinator redoes it.
    """

    def __init__(self, name: str):
        self.name = name
        self._queue: queue.Queue[tuple[str, Callable[[], None]] | None] = queue.Queue()
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, key: str, step: Callable[[], None]) -> bool:
        """Queue ``step`` unless one for ``key`` is queued or running; True if queued."""
        with self._lock:
            if key in self._pending:
                return False
            self._pending.add(key)
        self._queue.put((key, step))
        return True

    def busy_with(self, key: str) -> bool:
        with self._lock:
            return key in self._pending

    def stop(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            key, step = item
            try:
                step()
                # A plan or a build leaves models and TVM objects behind for good.
                freeze_long_lived()
            except Exception:
                logger.exception("%s: step for %s failed", self.name, key)
            finally:
                with self._lock:
                    self._pending.discard(key)
