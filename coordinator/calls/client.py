"""The coordinator's client-facing calls: submit models, look at and cancel jobs, list agents."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator import metrics
from coordinator.cluster_store import ClusterStore
from coordinator.errors import InvalidRequest, Unavailable
from coordinator.fingerprints import registered_fingerprint
from coordinator.hints import RpcServerFlags, TaskProgress
from coordinator.ids import validation_id
from coordinator.model_cache import ModelCache
from coordinator.onnx_uploads import store_onnx
from coordinator.values import AgentView, JobView, Submitted
from coordinator.waiting_jobs import WaitingJobs
from foundation.clock import utc_now
from foundation.domain.job_spec import DISTRIBUTED
from foundation.domain.jobs import JobState
from foundation.domain.shards import ShardState
from foundation.domain.submission import Submission
from foundation.domain.validations import ValidationState
from foundation.domain.weights_layout import WeightsLayout, weights_layout_for
from foundation.errors import FarmError, NotFound
from foundation.job_driver.admission import QUEUED, AskedJob, model_row, new_job_options
from foundation.job_driver.hits import answered_by, first_hit, library_scopes
from foundation.models.loaded import check_batch
from foundation.models.model_key import ModelKey, looks_like_path, model_key
from foundation.registry.entities import Artifact, JobEvent, Model
from foundation.registry.store import RegistryStore
from foundation.tvm_ir_lock import TVM_IR_LOCK

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.tuning_rounds import UntilRequest

logger = logging.getLogger("farm.coordinator")


class ClientCalls:
    """Calls from clients (the CLI, over FarmClient). New jobs are planned by the tick, which
    ``wake`` brings early; while ``draining`` is set, nothing new is taken."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, models: ModelCache, progress: TaskProgress,
                 rpc_servers: RpcServerFlags, waiting: WaitingJobs, *, data_dir: Path, tvm_version: str,
                 draining: threading.Event, wake: threading.Event):
        self._store = store
        self._cluster = cluster
        self._models = models
        self._progress = progress
        self._rpc_servers = rpc_servers
        self._waiting = waiting
        self._data_dir = data_dir
        self._tvm_version = tvm_version
        self._draining = draining
        self._wake = wake

    def submit(self, submission: Submission) -> list[Submitted]:
        """Start (or attach to, or answer from the registry) one job per fingerprint."""
        from foundation.hardware.targets import (
            FINGERPRINT_KIND,
            parse_target_kind,
            unusable_fingerprint,
        )

        if self._draining.is_set():
            raise Unavailable("the coordinator is shutting down", "submit again once it is back")
        kind = parse_target_kind(submission.target)
        try:
            check_batch(submission.batch)
        except FarmError as err:
            raise InvalidRequest(err.problem, err.fix) from None
        key = self._model_key(submission)
        try:
            layout = weights_layout_for(submission.weights_layout, kind)
        except FarmError as err:
            raise InvalidRequest(err.problem, err.fix) from None
        until = _until(submission, kind)
        asked = AskedJob(key, submission.job_spec(DISTRIBUTED), layout)
        # The planner may take another form for auto (foundation.meta_schedule.layout_choice).
        options = new_job_options(asked.spec, asked.layout)
        if until is not None:
            # Each round's model is timed here, on the coordinator's CPU: it tunes for that one.
            own = self._own_fingerprint(kind)
            if submission.fingerprint and submission.fingerprint != own:
                raise InvalidRequest(
                    f"--until times each round's model on the coordinator's CPU (fingerprint {own}); it cannot "
                    f"judge a model tuned for {submission.fingerprint}",
                    "drop --fingerprint, or run `farm submit --until` embedded on a box of that fingerprint")
            submission = replace(submission, fingerprint=own)
        if submission.fingerprint:
            stored = self._store.get_fingerprint(submission.fingerprint)
            if stored is None or stored.kind != FINGERPRINT_KIND[kind]:
                known = [f.id for f in self._store.list_fingerprints() if f.kind == FINGERPRINT_KIND[kind]]
                raise InvalidRequest(
                    f"no {FINGERPRINT_KIND[kind]} fingerprint {submission.fingerprint!r} is known for target {kind}",
                    f"known: {', '.join(known) or 'none'}; an agent registers its fingerprint when it starts",
                )
            problem = unusable_fingerprint(registered_fingerprint(self._store, stored.id), kind)
            if problem:
                raise InvalidRequest(f"fingerprint {stored.id} cannot give a {kind} target: {problem}",
                                     "restart its agents: registrations are checked whole now")
            fingerprint_ids = [stored.id]
        else:
            fingerprint_ids = self._usable_fingerprints(kind)
        if fingerprint_ids:
            # A job submitted before these agents registered is bound now, not at the next tick, so this
            # submit joins it rather than making a second equal job.
            self._waiting.bind(kind, utc_now())

        submitted = []
        model: Model | None = None
        known: dict[str, dict] | None = None  # the registry's fingerprints, read at the first lookup
        targets = self._targets(submission.target, fingerprint_ids, named=bool(submission.fingerprint))
        for fp_id, target in targets.items():
            if not submission.retune:
                if known is None:
                    known = {f.id: f.details for f in self._store.list_fingerprints()}
                hit = self._hit(key, target, fp_id, asked.hit_forms(kind), known=known)
                metrics.registry_lookup(hit is not None)
                if hit is not None:
                    answered, _ = answered_by(self._store, hit, asked.spec, asked.layout, target, fp_id)
                    submitted.append(Submitted(answered, False))
                    continue
            model = model or self._ensure_model(key)
            # A job tuned in rounds has a goal of its own: it never joins another job, nor one joins it.
            job, attached = self._cluster.jobs.create_job(
                model_id=model.id, target_request=submission.target, target_kind=kind, target=target,
                fingerprint_id=fp_id, options=options, now=utc_now(), status=QUEUED,
                attach_in=layout if until is None else None)
            submitted.append(Submitted(job, attached))
        if not fingerprint_ids:
            model = self._ensure_model(key)
            job, attached = self._cluster.jobs.create_job(
                model_id=model.id, target_request=submission.target, target_kind=kind, target="",
                fingerprint_id=None, options=options, now=utc_now(), status=_waiting_status(kind), attach_in=layout)
            if attached:
                return [Submitted(job, True)]
            submitted.append(Submitted(job, False))
        self._wake.set()
        return submitted

    def _hit(self, key: ModelKey, target: str, fp_id: str, forms: tuple[WeightsLayout, ...], *,
             known: dict[str, dict]) -> Artifact | None:
        """The library answering a submit for ``fp_id`` in one of ``forms``: its own, else the newest of a
        compatible fingerprint's (the same hardware at another size: foundation.job_driver.hits);
        ``known``: the registry's fingerprints, read once per submit."""
        scopes = library_scopes(self._store, target, fp_id, known.get(fp_id, {}), known=known)
        found = first_hit(self._store, key, scopes, self._tvm_version, forms)
        if found.scope is not None and not found.scope.is_own(fp_id):
            logger.info("%s for %s answered by %s's library (the same hardware at another size)",
                        key.describe(), fp_id, found.scope.fingerprint_id)
        return found.artifact

    def _targets(self, user_target: str, fingerprint_ids: list[str], *, named: bool) -> dict[str, str]:
        """Each fingerprint's canonical target (JSON), for those whose agents can measure it.

        A target they cannot (an mcpu LLVM does not know, whose code falls back to a generic CPU
        under a key of its own; instructions or an architecture their CPU lacks) is refused, as
        `farm submit` refuses it on its own box (farm.session.open_context). Fingerprints that
        cannot are left out where others can; a named one, or none left, is a refusal.
        """
        from foundation.hardware.targets import measurable_target, target_json

        targets: dict[str, str] = {}
        refusal = None
        for fp_id in fingerprint_ids:
            try:
                target = measurable_target(user_target, registered_fingerprint(self._store, fp_id))
            except FarmError as err:
                refusal = refusal or InvalidRequest(f"fingerprint {fp_id} cannot tune it: {err.problem}", err.fix)
                if named:
                    raise refusal from None
                logger.info("fingerprint %s is left out of a submit: %s", fp_id, err.problem)
                continue
            targets[fp_id] = target_json(target)
        if refusal is not None and not targets:
            raise refusal
        return targets

    def _own_fingerprint(self, kind: str) -> str:
        """This box's fingerprint for ``kind``, in the registry (it tunes jobs timed here)."""
        from foundation.hardware.fingerprint import local_fingerprint

        fingerprint = local_fingerprint(kind)
        if self._store.get_fingerprint(fingerprint.id) is None:
            self._store.upsert_fingerprint(fingerprint.id, fingerprint.kind, fingerprint.summary, fingerprint.details)
        return fingerprint.id

    def _usable_fingerprints(self, kind: str) -> list[str]:
        """Fingerprints with agents of ``kind`` whose details give a target. One that cannot (a
        kind the agent also lists, a row stored before registrations were checked whole) is left
        out and logged: what one agent registered never fails another caller's submit."""
        from foundation.hardware.targets import unusable_fingerprint

        usable = []
        for fp_id in self._cluster.agents.agents_matching(kind):
            problem = unusable_fingerprint(registered_fingerprint(self._store, fp_id), kind)
            if problem:
                logger.warning("fingerprint %s is left out of %s submits: %s", fp_id, kind, problem)
            else:
                usable.append(fp_id)
        return usable

    def _model_key(self, submission: Submission) -> ModelKey:
        if submission.onnx is not None:
            digest = hashlib.sha256(submission.onnx.content).hexdigest()
            if submission.onnx.sha256 and submission.onnx.sha256.lower() != digest:
                raise InvalidRequest(
                    f"the ONNX file {submission.onnx.file_name!r} arrived with sha256 {digest}, "
                    f"not the {submission.onnx.sha256} it was sent with",
                    "the upload was damaged or the hash is of another file; send it again",
                )
            if not submission.onnx.content:
                raise InvalidRequest(f"the ONNX file {submission.onnx.file_name!r} is empty", "send the model's bytes")
            _refuse_external_data(submission.onnx)
            path = store_onnx(self._data_dir, digest, submission.onnx.content)
            name = Path(submission.onnx.file_name).stem or digest[:12]
            return ModelKey(name, submission.batch, "onnx", digest, path)
        name = submission.model
        if not name or looks_like_path(name):
            raise InvalidRequest(
                f"{name!r} is not a zoo model name" if name else "the request names no model",
                "name a zoo model (see `farm models`), or send an ONNX file's bytes",
            )
        try:
            return model_key(name, submission.batch)
        except NotFound as err:  # an unknown name is bad input here, not a missing resource
            raise InvalidRequest(err.problem, err.fix) from None

    def _ensure_model(self, key: ModelKey) -> Model:
        """The registry's row for the model, loading it (TVM) the first time it is seen."""
        from foundation.models.loading import load_model

        stored = self._store.find_model(key.name, key.batch, key.source_digest)
        if stored is not None:
            return stored
        try:
            with TVM_IR_LOCK:
                loaded = load_model(str(key.path) if key.path else key.name, key.batch)
                loaded.identity()  # printed from the IR: under the same lock
        except FarmError as err:  # a broken upload: named as the caller knows it, not by where it is kept here
            problem = err.problem.replace(str(key.path), f"the uploaded {key.name}.onnx") if key.path else err.problem
            raise InvalidRequest(problem, err.fix) from None
        model = model_row(self._store, key, loaded)
        self._models.put(model.id, loaded)
        return model

    def get_job(self, job_id: str) -> JobView:
        job = self._store.get_job(job_id)
        shards = self._cluster.plans.shards_of(job_id)
        counts = dict.fromkeys(ShardState, 0)
        for shard in shards:
            counts[shard.state] += 1
        artifact = self._store.get_artifact(job.artifact_id) if job.artifact_id else None
        return JobView(
            job=job,
            model=self._store.get_model(job.model_id),
            shard_counts=counts,
            failed_shards=[s for s in shards if s.state is ShardState.FAILED],
            artifact=artifact,
            trial_errors=self._progress.trial_errors(job_id),
        )

    def list_jobs(self, limit: int = 20, states: Sequence[str] = (), model_name: str = "") -> list[JobView]:
        jobs = self._store.list_jobs(limit=limit or 20, states=states, model_name=model_name or None)
        return [self.get_job(j.id) for j in jobs]

    def events(self, job_id: str, after_sequence: int, limit: int = 500) -> list[JobEvent]:
        """A job's events after ``after_sequence`` (WatchJob polls this)."""
        return self._cluster.events.events_after(job_id, after_sequence, limit)

    def last_event_sequence(self, job_id: str) -> int:
        self._store.get_job(job_id)  # NotFound for an unknown id
        return self._cluster.events.last_event_sequence(job_id)

    def cancel_job(self, job_id: str, reason: str = "") -> JobView:
        self._cluster.plans.cancel_job(job_id, utc_now(), reason or "cancelled by user")
        return self.get_job(job_id)

    def list_agents(self, target_kind: str = "", include_lost: bool = False) -> list[AgentView]:
        views = []
        summaries: dict[str, str] = {}
        for agent in self._cluster.agents.list_agents(target_kind or None, include_lost=include_lost):
            if agent.fingerprint_id not in summaries:
                fp = self._store.get_fingerprint(agent.fingerprint_id)
                summaries[agent.fingerprint_id] = fp.summary if fp else ""
            leases = [(s.job_id, s.id, s.attempt) for s in self._cluster.leases.leases_of_agent(agent.id)]
            validation = self._validation_held_by(agent.id)
            if validation is not None:
                leases.append(validation)
            views.append(AgentView(agent, summaries[agent.fingerprint_id], leases,
                                   self._rpc_servers.serving(agent.id)))
        return views

    def _validation_held_by(self, agent_id: str) -> tuple[str, str, int] | None:
        for job in self._store.list_jobs(limit=100, state=JobState.VALIDATING.value):
            validation = self._cluster.validations.get_validation(job.id)
            if validation and validation.state is ValidationState.LEASED and validation.agent_id == agent_id:
                return (job.id, validation_id(job.id), validation.attempt)
        return None


def _until(submission: Submission, kind: str) -> "UntilRequest | None":
    """`--until`, checked: a goal the coordinator can time on its own CPU."""
    if submission.until is None:
        return None
    from foundation.job_driver.tuning_rounds import check_until

    if kind != "llvm":
        raise InvalidRequest(
            f"--until through a coordinator times each round's model on the coordinator's CPU; a {kind} model "
            "would have to be timed on an agent's device, which the farm does not do between rounds",
            "tune without --until, or run `farm submit --until` embedded on the box with that device")
    try:
        check_until(submission.until)
    except FarmError as err:
        raise InvalidRequest(f"{err.problem} on the coordinator", err.fix) from None
    return submission.until


def _refuse_external_data(upload) -> None:
    """A submit carries the .onnx file alone: weights kept in files beside it never arrive, and
    where they were looked for here is the coordinator's business."""
    from foundation.models.onnx_import import external_data_files

    files = external_data_files(upload.content)
    if files:
        shown = ", ".join(name[:100] for name in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        raise InvalidRequest(
            f"the uploaded {Path(upload.file_name).name[:100]} keeps its weights in {shown}, beside it, "
            "which a submit to a coordinator does not carry",
            "save the model with its weights inside (onnx.save(model, path, save_as_external_data=False), "
            "up to 2 GiB), or submit it without --coordinator")


def _waiting_status(kind: str) -> str:
    return (f"waiting for an agent with target kind {kind} (none registered); "
            "start `farm agent` on such a box")
