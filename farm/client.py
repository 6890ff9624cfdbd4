"""Talking to a coordinator: the client side of the FarmClient gRPC service."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from farm.job_document import job_document
from foundation.domain.jobs import FINAL_STATES
from foundation.domain.trial_plan import PlannedTrials, TrialPlan
from foundation.errors import EXIT_INTERNAL, BadInput, FarmError, NotFound, Unreachable
from foundation.models.loaded import check_batch
from foundation.models.model_key import check_onnx_path, looks_like_path

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.submission import OnnxUpload, Submission
    from foundation.wire.access import ChannelAccess

# The longest one WatchJob stream is asked to last when the watch has a deadline.
_LONGEST_STREAM_S = 3600.0
# Room in a SubmitRequest for its fields beside an ONNX file's bytes (a target is at most 4 KiB).
_SUBMIT_FIELDS_BYTES = 64 * 1024
# What gRPC says when DNS knows no such host (a well-formed address naming nothing).
_NO_SUCH_HOST = re.compile(r"Domain name not found|Name or service not known|NXDOMAIN", re.IGNORECASE)


def job_state_name(value: int) -> str:
    from foundation.wire import farm_pb2

    return farm_pb2.JobState.Name(value).removeprefix("JOB_STATE_").lower()


def _reuse(job) -> dict | None:
    """A proto Job's reuse as `ReusePlan.summary()` spells it (farm status, embedded or not)."""
    if not job.HasField("reuse"):
        return None
    r = job.reuse
    reused = r.skipped + r.topped_up
    return {"mode": r.mode, "tasks": r.tasks, "reused": reused, "skipped": r.skipped, "topped_up": r.topped_up,
            "topup_trials": r.topup_trials, "planned_trials": r.planned_trials, "trials": r.trials,
            "trials_saved": r.planned_trials - r.trials}


def _warm_start(job) -> dict | None:
    """A proto Job's warm start as foundation.domain.warm_start_use.job_warm_start spells it."""
    if not job.HasField("warm_start"):
        return None
    w = job.warm_start
    return {"seeds_offered": w.seeds_offered, "seeds_own_fingerprint": w.seeds_own_fingerprint,
            "seeds_other_fingerprints": w.seeds_other_fingerprints, "seeds_rejected": w.seeds_rejected,
            "seeds_failed": w.seeds_failed, "pretrained_cost_model": w.pretrained_cost_model,
            "cost_model_sha256": w.cost_model_sha256, "cost_model_kind": w.cost_model_kind,
            "cost_model_note": w.cost_model_note, "shards": w.shards}


def job_json(job) -> dict:
    """A proto Job as the same JSON document the embedded `farm submit --json` prints (farm.job_document)."""
    artifact = None
    if job.HasField("artifact") and job.artifact.id:
        a = job.artifact
        artifact = {
            "id": a.id,
            "sha256": a.sha256,
            "size": a.size_bytes,
            "latency_ms": {"mean": a.latency.mean_ms, "median": a.latency.median_ms, "std": a.latency.std_ms},
            "untuned_latency_ms": a.untuned_latency.mean_ms if a.HasField("untuned_latency") else None,
            "validation": {"passed": a.validated},
            "slower_than_untuned": a.speed.slower_than_untuned if a.HasField("speed") else False,
            "speed": _speed(a.speed) if a.HasField("speed") else None,
        }
    return job_document({
        "job": job.id,
        "state": job_state_name(job.state),
        "status": job.status,
        "cache_hit": job.cache_hit,
        "trials": job.trials_done,
        "trials_budget": job.trials_budget,
        "trial_plan": _trial_plan(job),
        "fingerprint": job.fingerprint_id or None,
        "model": job.model.name,
        "batch": job.model.batch,
        "target": job.target,
        "target_kind": job.target_kind,
        "weights_layout": job.weights_layout or None,
        "weights_layout_choice": {"chosen": job.weights_layout, "why": job.weights_layout_why}
        if job.weights_layout_why else None,
        "trial_errors": job.trial_errors,
        "shards": {
            "pending": job.shards.pending, "leased": job.shards.leased, "done": job.shards.done,
            "failed": job.shards.failed, "cancelled": job.shards.cancelled,
        },
        "error": job.error or None,
        "failed_shards": [
            {"shard": f.shard_id, "tasks": list(f.task_names),
             "attempts": [{"attempt": a.attempt, "agent": a.agent_id, "reason": a.reason} for a in f.attempts]}
            for f in job.failed_shards
        ],
        "artifact": artifact,
        "reuse": _reuse(job),
        "until": _until(job),
        "warm_start": _warm_start(job),
        "built_untuned": {"tasks": list(job.built_untuned), "of": job.tasks_built} if job.tasks_built else None,
        "created_at": _time(job, "created_at"),
        "started_at": _time(job, "started_at"),
        "finished_at": _time(job, "finished_at"),
        # What a registry's own job has beside: no runner process here, and the row's own fields stay
        # in the coordinator's registry.
        "runner": None,
        "heartbeat_at": None,
        "cancel_requested": None,
        "id": job.id,
        "model_id": None,
        "fingerprint_id": job.fingerprint_id or None,
        "trials_done": job.trials_done,
        "options": None,
        "artifact_id": artifact["id"] if artifact else None,
        "target_request": None,
        "parent_request": None,
        "cancel_requested_at": None,
    })


def _speed(speed) -> dict:
    """A proto UntunedSpeed as SpeedCheck.to_json spells it."""
    return {"tuned_median_ms": speed.tuned_median_ms, "untuned_median_ms": speed.untuned_median_ms,
            "ratio": speed.ratio, "slower_than_untuned": speed.slower_than_untuned,
            "kept_untuned": speed.kept_untuned, "runs": speed.runs, "untuned_runs": speed.untuned_runs}


def _until(job) -> dict | None:
    """A proto Job's rounds as RoundsOutcome.to_json spells them (farm status, embedded or not)."""
    if not job.HasField("until"):
        return None
    u = job.until
    planned = [list(p.trials) for p in u.planned]
    # An older coordinator sends no plans: its rounds read with none.
    rounds = [{"trials": r.trials, "latency_ms": r.median_ms, "estimated_ms": r.estimated_ms or None,
               "timing": {"median_ms": r.median_ms, "upper_quartile_ms": r.upper_quartile_ms, "goal_ms": r.goal_ms,
                          "blocks": r.blocks, "blocks_won": None if r.blocks_won < 0 else r.blocks_won,
                          "beats": r.beats}, **({"planned": planned[i]} if i < len(planned) else {})}
              for i, r in enumerate(u.rounds)]
    reference = ({"mean": u.reference_latency.mean_ms, "median": u.reference_latency.median_ms,
                  "std": u.reference_latency.std_ms, "runs": u.reference_latency.runs,
                  "warmup": u.reference_latency.warmup} if u.HasField("reference_latency") else None)
    check = ({"passed": u.reference_check.passed, "max_abs_err": u.reference_check.max_abs_err,
              "rtol": u.reference_check.rtol, "atol_scale": u.reference_check.atol_scale,
              **({"detail": u.reference_check.detail} if u.reference_check.detail else {})}
             if u.HasField("reference_check") else None)
    return {"goal": u.goal, "goal_ms": u.goal_ms, "reference_latency_ms": reference, "reference_check": check,
            "stopped": u.stopped or None, "summary": u.summary or None,
            "latency_ms": rounds[-1]["latency_ms"] if rounds else None, "rounds": rounds, "planned": planned}


def _trial_plan(job) -> dict | None:
    """The job's trial plan as TrialPlan.to_json gives it. An older coordinator sends only its lines: the
    budget is then the job's and the per_task_cap left out (farm.job_document says how it reads)."""
    older = not job.HasField("trial_plan_budget")
    if older and not job.trial_plan:
        return None
    tasks = tuple(_planned_trials(t) for t in job.trial_plan)
    if older:
        return {"budget": job.trials_budget, "planned": sum(t.trials for t in tasks),
                "tasks": [t.to_json() for t in tasks]}
    plan = job.trial_plan_budget
    return TrialPlan(tasks, plan.budget, plan.per_task_cap, tuple(plan.phases),
                     plan.peak_gflops if plan.HasField("peak_gflops") else None).to_json()


def _planned_trials(line) -> PlannedTrials:
    """A proto PlannedTrials as the domain's."""
    return PlannedTrials(line.task, line.trials, line.share, line.minor, line.measured,
                         line.in_model_ms if line.HasField("in_model_ms") else None,
                         line.loss_ms if line.HasField("loss_ms") else None, tuple(line.phases))


def agent_json(agent) -> dict:
    """A proto Agent as JSON: every field present, states and times as words and ISO 8601."""
    from foundation.wire import farm_pb2

    return {
        "id": agent.id,
        "state": farm_pb2.AgentState.Name(agent.state).removeprefix("AGENT_STATE_").lower(),
        "fingerprint_id": agent.fingerprint_id,
        "fingerprint_summary": agent.fingerprint_summary,
        "target_kinds": list(agent.target_kinds),
        "hostname": agent.hostname,
        "address": agent.address,
        "tvm_version": agent.tvm_version,
        "registered_at": _time(agent, "registered_at"),
        "last_heartbeat": _time(agent, "last_heartbeat"),
        "running_leases": [{"job_id": r.job_id, "shard_id": r.shard_id, "attempt": r.attempt}
                           for r in agent.running_leases],
        "rpc_server_serving": agent.rpc_server_serving,
        "trials_per_second": round(agent.trials_per_second, 3),
    }


def _time(message, field: str) -> str | None:
    """A Timestamp field as ISO 8601 (UTC), None when unset."""
    if not message.HasField(field):
        return None
    return getattr(message, field).ToDatetime(tzinfo=dt.timezone.utc).isoformat()


class CoordinatorClient:
    """A FarmClient stub with errors translated into FarmErrors a person can act on."""

    def __init__(self, address: str, timeout: float = 30.0, access: "ChannelAccess | None" = None):
        """``access``: the token and TLS settings to present (foundation.wire.access); by
        default none, which a coordinator listening on loopback without a token accepts."""
        from foundation.wire import farm_pb2_grpc
        from foundation.wire.access import check_address, open_channel

        check_address(address)  # a malformed one is bad input; only a call tells an unreachable one
        self.address = address
        self.timeout = timeout
        self.access = access
        self.channel = open_channel(address, access)
        self.stub = farm_pb2_grpc.FarmClientStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def _call(self, method, request, **kwargs):
        import grpc

        try:
            return method(request, timeout=kwargs.pop("timeout", self.timeout), **kwargs)
        except grpc.RpcError as err:
            raise coordinator_error(err, self.address, self.access) from None

    def submit(self, submission: "Submission"):
        """Submit; a model given by its path is sent as its file's bytes. The jobs it started or joined."""
        from foundation.wire.submission import submit_request

        check_batch(submission.batch)
        if submission.onnx is None and looks_like_path(submission.model):
            submission = replace(submission, onnx=_upload(submission.model))
        return self._call(self.stub.Submit, submit_request(submission)).jobs

    def get_job(self, job_id: str):
        from foundation.wire import farm_pb2

        return self._call(self.stub.GetJob, farm_pb2.GetJobRequest(job_id=job_id))

    def list_jobs(self, limit: int = 20, states: Iterable[str] = (), model_name: str | None = None):
        """The newest jobs, in any of ``states`` (every state when empty), of models named ``model_name``."""
        from foundation.wire import farm_pb2

        request = farm_pb2.ListJobsRequest(
            limit=limit, states=[farm_pb2.JobState.Value(f"JOB_STATE_{state.upper()}") for state in states],
            model_name=model_name or "")
        return self._call(self.stub.ListJobs, request).jobs

    def cancel(self, job_id: str, reason: str = ""):
        from foundation.wire import farm_pb2

        return self._call(self.stub.CancelJob, farm_pb2.CancelJobRequest(job_id=job_id, reason=reason))

    def list_agents(self, include_lost: bool = False):
        from foundation.wire import farm_pb2

        return self._call(self.stub.ListAgents, farm_pb2.ListAgentsRequest(include_lost=include_lost)).agents

    def export_pack(self, path: Path, *, fingerprint: str | None = None, model: str | None = None,
                    target: str | None = None, artifacts: bool = True, timeout: float = 3600.0) -> None:
        """The coordinator's registry as a pack, streamed into ``path`` (ExportPack)."""
        import grpc

        from foundation.wire import farm_pb2

        request = farm_pb2.ExportPackRequest(fingerprint_id=fingerprint or "", model_name=model or "",
                                             target=target or "", without_artifacts=not artifacts)
        try:
            with path.open("wb") as out:
                for chunk in self.stub.ExportPack(request, timeout=timeout):
                    out.write(chunk.data)
        except grpc.RpcError as err:
            raise coordinator_error(err, self.address, self.access) from None

    def import_pack(self, path: Path, timeout: float = 3600.0) -> dict:
        """Stream the pack at ``path`` into the coordinator's registry (ImportPack); what it copied."""
        import json

        from foundation.wire import farm_pb2

        def chunks() -> Iterator:
            with path.open("rb") as stream:
                while chunk := stream.read(1 << 20):
                    yield farm_pb2.PackChunk(data=chunk)

        return json.loads(self._call(self.stub.ImportPack, chunks(), timeout=timeout).copied_json)

    def watch(self, job_id: str, deadline: float | None = None) -> Iterator:
        """Events of a job until it is final (or ``deadline``, a time.monotonic() value).

        A broken stream is resumed after the last sequence seen, so a coordinator restart
        does not end a watch.
        """
        import grpc

        from foundation.wire import farm_pb2

        after = 0
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            try:
                # A far deadline overflows gRPC's (the stream ended at once): one stream
                # waits at most _LONGEST_STREAM_S, and the next resumes after it.
                for event in self.stub.WatchJob(farm_pb2.WatchJobRequest(job_id=job_id, after_sequence=after),
                                                timeout=None if remaining is None else
                                                min(remaining, _LONGEST_STREAM_S)):
                    after = max(after, event.sequence)
                    yield event
                return  # the server ends the stream when the job is final
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    continue  # this stream's time is up; the deadline's is told above
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise coordinator_error(err, self.address, self.access) from None
                time.sleep(1.0)  # coordinator restarting: resume after the last event seen


def _upload(model: str) -> "OnnxUpload":
    """The ONNX file at ``model`` (a path) as a submit carries it."""
    from foundation.domain.submission import OnnxUpload

    path = Path(model).expanduser()
    check_onnx_path(path, model)
    _check_upload_size(path, model)
    content = path.read_bytes()
    return OnnxUpload(path.name, content, hashlib.sha256(content).hexdigest())


def _check_upload_size(path: Path, given: str) -> None:
    """Refuse an ONNX file larger than a message may carry, before reading it: gRPC would say only
    "Sent message larger than max". The rest of a SubmitRequest is bounded (request_limits) far
    below the room left for it."""
    from foundation.wire import MAX_MESSAGE_BYTES

    limit = MAX_MESSAGE_BYTES - _SUBMIT_FIELDS_BYTES
    size = path.stat().st_size
    if size > limit:
        raise BadInput(f"{given} is {size / 2**20:.1f} MiB; a submit to a coordinator carries at most "
                       f"{limit / 2**20:.1f} MiB",
                       "submit it without --coordinator, on a box that can tune it")


def coordinator_error(err, address: str, access: "ChannelAccess | None" = None) -> FarmError:
    """A coordinator's gRPC error as the FarmError a person can act on; ``access``, what the
    call presented, lets a failed TLS handshake be told apart (foundation.wire.handshake)."""
    import grpc

    from foundation.wire.access import TLS_FIX
    from foundation.wire.handshake import tls_failure

    code, details = err.code(), err.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE and _registry_failing(err):
        problem = details.removeprefix("the coordinator's registry is failing: ")
        return Unreachable(f"the coordinator at {address} is up, but its registry is failing: {problem}",
                           "it serves again once its registry answers: check the registry's database server")
    if code == grpc.StatusCode.UNAVAILABLE:
        tls = tls_failure(details, address, access)
        if tls is not None:
            return Unreachable(f"no TLS connection to the coordinator at {address}: {tls.problem}", tls.fix)
        if _NO_SUCH_HOST.search(details):
            return BadInput(f"no host is named {address.rsplit(':', 1)[0]} (--coordinator {address})",
                            "check the host name in --coordinator / FARM_COORDINATOR")
        fix = "check --coordinator / FARM_COORDINATOR and that `farm coordinator` runs there"
        if "Socket closed" in details:  # what a plaintext call to a TLS port sees
            fix += f"; {TLS_FIX}"
        return Unreachable(f"cannot reach the coordinator at {address}: {details}", fix)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        problem, _, fix = details.partition(" (")
        return BadInput(f"the coordinator at {address} refused the call: {problem}", fix.rstrip(")") or None)
    if code == grpc.StatusCode.NOT_FOUND:  # the coordinator's message has its own hint, as every FarmError's
        problem, _, fix = details.partition(" (")
        return NotFound(problem, fix.rstrip(")") or "see `farm jobs` or `farm models`")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Unreachable(f"the coordinator at {address} did not answer in time", "retry, or check its load")
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        return _CoordinatorBug(f"the coordinator at {address} failed: {details}",
                               "this is a bug in tvm-farm's coordinator; its log has the traceback: report it")
    problem, _, fix = details.partition(" (")
    return FarmError(problem, fix.rstrip(")") or None)


def _registry_failing(err) -> bool:
    """An UNAVAILABLE from a running coordinator whose registry fails (coordinator.registry_health)."""
    from foundation.wire import UNAVAILABLE_CAUSE_KEY, UNAVAILABLE_REGISTRY

    trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    return any(key == UNAVAILABLE_CAUSE_KEY and value == UNAVAILABLE_REGISTRY for key, value in trailing or ())


class _CoordinatorBug(FarmError):
    """The coordinator failed on a request it should have answered (INTERNAL): exit 70, as a bug here is."""

    exit_code = EXIT_INTERNAL


def final(state: str) -> bool:
    return state in FINAL_STATES
