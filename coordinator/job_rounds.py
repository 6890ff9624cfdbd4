"""A distributed job tuned in rounds (`farm submit --until`): shard a round, judge its model here, go on or stop.

The rounds loop is the embedded farm's (foundation.job_driver.rounds_loop); only a round's tuning
differs: its trials are sharded to the job's agents like any job's. The loop's step runs when the job
is planned (the first round) and when every shard of a round is done: the model is built with the
best records and timed on the coordinator's CPU against the goal (foundation.job_driver.tuning_rounds:
onnxruntime interleaved with it, or a latency), then the next round is planned or the rounds stop.
A stopped job is built, validated and committed as any job is, with the last round's library.

The model is timed on the coordinator's box, so a job tuned in rounds is tuned for the
coordinator's own fingerprint (coordinator.calls.client refuses anything else). How the rounds
went lives in the job's options (`until`), so a restarted coordinator carries on: a round whose
shards are done and whose model was not judged yet is judged again.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.cluster_store import ClusterStore
from coordinator.hints import WorkloadJson
from coordinator.model_cache import ModelCache
from coordinator.onnx_uploads import onnx_path
from foundation.clock import utc_now
from foundation.domain.job_spec import job_notes, job_options, job_spec, noted
from foundation.domain.jobs import JobState
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.shard_split import TaskCost, split_tasks
from foundation.domain.tuning_rounds import UntilRequest
from foundation.errors import FarmError
from foundation.job_driver import steps
from foundation.job_driver.rounds_loop import TuningInRounds
from foundation.job_driver.tuning_rounds import planned_so_far, set_up_goal
from foundation.registry.store import RegistryStore
from foundation.tvm_ir_lock import TVM_IR_LOCK

if TYPE_CHECKING:  # pragma: no cover

    from foundation.domain.trial_plan import TrialPlan
    from foundation.job_driver.pipeline import TuningStart
    from foundation.registry.entities import Job

logger = logging.getLogger("farm.coordinator")


@dataclass
class _RoundsContext:
    """What judging a job's rounds needs, kept between rounds (rebuilt after a restart)."""

    rounds: TuningInRounds
    goal: RoundsOutcome  # the goal as set up, before any round (onnxruntime's timing and check)
    layout_notes: dict  # the form `auto` chose and why, for the job's notes (empty once written)


class JobRounds:
    """The rounds of the coordinator's jobs tuned in rounds (coordinator.job_site's tuning, for them)."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, models: ModelCache, workloads: WorkloadJson,
                 tvm_version: str, data_dir: Path, wake: threading.Event):
        self._store = store
        self._cluster = cluster
        self._models = models
        self._workloads = workloads
        self._tvm_version = tvm_version
        self._data_dir = data_dir
        self._wake = wake
        self._contexts: dict[str, _RoundsContext] = {}
        self._libraries: dict[str, bytes] = {}  # each stopped job's last round's build, for its build step

    def take_library(self, job_id: str) -> bytes | None:
        """The last round's build of a stopped job (the records did not change since), once."""
        return self._libraries.pop(job_id, None)

    def start(self, job: "Job", start: "TuningStart") -> None:
        """The first round planned and sharded (queued -> running), from the plan step's rounds and goal
        (foundation.job_driver.pipeline: onnxruntime checked and timed here)."""
        assert start.rounds is not None and start.goal is not None
        _check_timed_here(job)
        context = _RoundsContext(start.rounds, start.goal, start.notes)
        self._contexts[job.id] = context
        outcome = context.goal
        plan = context.rounds.advance(outcome, [0] * len(context.rounds.tasks))
        if plan is None:
            raise FarmError(f"job {job.id} has no trials to plan for its first round", "submit it without --until")
        planned, shards = self._shards(job, context, plan)
        self._store.update_job(job.id, expect_state=JobState.QUEUED.value, trials_budget=start.trials_budget,
                               options=noted(job, **context.layout_notes, until=outcome, trial_plan=plan))
        self._cluster.plans.add_job_plan(job.id, planned, shards, utc_now())
        self.remember_workloads(job.id)
        logger.info("job %s: round 1 of at most %d, %d trials in %d shards, until %s", job.id,
                    len(context.rounds.slices), plan.total, len(shards), outcome.goal.describe())
        self._wake.set()

    def end_round(self, job: "Job") -> RoundsOutcome | None:
        """Judge the round just tuned (every shard of it done), then plan and shard the next one: None; or
        the rounds stop: how they went, and the last round's build kept for the job's build step."""
        outcome = _outcome(job)
        context = self._context(job)
        number = len(outcome.planned)
        tuned = None  # the trials its shards measured: its shards are done; None: judged already
        if len(outcome.rounds) < number:
            tuned = max(0, job.trials_done - sum(r.trials for r in outcome.rounds))
        plan = context.rounds.advance(outcome, planned_so_far(outcome.planned, len(context.rounds.tasks)), tuned)
        if tuned is not None:
            logger.info("job %s: round %d judged: %s", job.id, number, outcome.summary())
        if plan is None:
            if context.rounds.library is not None:
                self._libraries[job.id] = context.rounds.library
            self._contexts.pop(job.id, None)
            return outcome
        planned, shards = self._shards(job, context, plan)
        added = self._cluster.plans.add_round(
            job.id, planned, shards, utc_now(),
            options=noted(job, until=outcome, trial_plan=_summed(job, plan)))
        if added is None:  # cancelled meanwhile
            return None
        self.remember_workloads(job.id)
        logger.info("job %s: round %d of at most %d, %d trials in %d shards", job.id, number + 1,
                    len(context.rounds.slices), plan.total, len(shards))
        self._wake.set()
        return None

    def _request(self, job: "Job") -> UntilRequest:
        until = job_spec(job).until
        assert until is not None, f"job {job.id} is not tuned in rounds"
        return until

    def _context(self, job: "Job") -> _RoundsContext:
        """The job's model, tasks and judge: kept from its plan step, or made again after a restart."""
        context = self._contexts.get(job.id)
        if context is not None:
            return context
        import json

        from foundation.hardware.targets import to_tvm_target
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

        target_doc = json.loads(job.target)
        _check_timed_here(job)
        install_lean_tensor_intrinsics(target_doc["kind"])
        model = self._store.get_model(job.model_id)
        loaded = self._models.get(model)
        target = to_tvm_target(target_doc)
        stored = job_options(job)
        onnx_file = onnx_path(self._data_dir, model.source_digest).read_bytes() if model.source == "onnx" else None
        # After a restart the job's notes name the form its plan step chose.
        spec = replace(stored.spec, weights_layout=None)
        with TVM_IR_LOCK:
            planned = steps.plan(loaded, target, self._database(job), spec, stored.notes.weights_layout)
            outcome, judge = set_up_goal(self._request(job), loaded, target, stored.spec.seed, onnx_file)
        rounds = TuningInRounds(self._request(job), planned.tasks, planned.budget, loaded, target, planned.form, judge,
                                lambda: self._database(job), TVM_IR_LOCK)
        context = _RoundsContext(rounds, outcome, {})
        self._contexts[job.id] = context
        return context

    def _database(self, job: "Job"):
        from foundation.meta_schedule.database.registry_database import tvm_database_for

        return tvm_database_for(self._store, job.fingerprint_id, job.target, self._tvm_version, {})

    def _shards(self, job: "Job", context: _RoundsContext, plan: "TrialPlan"):
        import tvm_ffi

        from foundation.meta_schedule.database.registry_database import workload_json
        from foundation.registry.entities import PlannedTask

        with TVM_IR_LOCK:
            planned = [PlannedTask(name=task.name, weight=task.weight, flop=task.flop,
                                   workload_shash=str(tvm_ffi.structural_hash(task.mod)),
                                   mod_json=workload_json(task.mod), trials_budget=trials)
                       for task, trials in zip(context.rounds.tasks, plan.trials) if trials > 0]
        agents = self._cluster.agents.agents_matching(job.target_kind).get(job.fingerprint_id, 0)
        shards = split_tasks(job.id, [TaskCost(t.name, t.weight, t.flop, t.trials_budget) for t in planned],
                             agents, plan.total)
        return planned, shards

    def remember_workloads(self, job_id: str) -> None:
        # What leases hand out, converted now rather than while agents wait for it.
        for task in self._cluster.plans.job_tasks(job_id):
            self._workloads.of(task.workload_id, task.mod_json)


def _check_timed_here(job: "Job") -> None:
    """A job's rounds are timed on the coordinator's CPU: FarmError for a job tuned for another."""
    import json

    from foundation.hardware.fingerprint import local_fingerprint

    own = local_fingerprint(json.loads(job.target)["kind"]).id
    if job.fingerprint_id != own:
        raise FarmError(f"job {job.id} tunes for fingerprint {job.fingerprint_id}, but its rounds are timed on "
                        f"the coordinator's CPU ({own})", "submit it again without --until")


def _outcome(job: "Job") -> RoundsOutcome:
    """How the job's rounds went so far (its notes' `until`, written when its first round was planned)."""
    until = job_notes(job).until
    assert until is not None, f"job {job.id} has no rounds yet"
    return until


def _summed(job: "Job", plan: "TrialPlan") -> "TrialPlan":
    """The job's trial plan after another round: each task's trials added to the rounds' before,
    its share as this round saw it."""
    from foundation.domain.trial_plan import TrialPlan

    earlier = job_notes(job).trial_plan
    if earlier is None or len(earlier.tasks) != len(plan.tasks):
        return plan
    tasks = tuple(replace(line, trials=line.trials + old.trials) for line, old in zip(plan.tasks, earlier.tasks))
    return TrialPlan(tasks, job.trials_budget or plan.budget, plan.per_task_cap)
