"""Submit, follow and list jobs from Python, embedded on this box or through a coordinator, as typed values.

    import farm
    job = farm.submit("resnet-18", "llvm", 1, trials=200)        # embedded: tunes here
    job = farm.submit("bert", "cuda", 8, coordinator="coord:50051")  # the farm's agents tune it
    farm.status(job.id).state, [j.id for j in farm.jobs()]

Every function reads the same job document `farm status --json` prints (the registry's, or a
coordinator's) as a farm.Job (farm.job_document), so the CLI and the API never disagree about a job.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from farm import arguments
from farm.connection import Coordinator
from farm.job_document import Job
from foundation.config import check_switches
from foundation.domain import request_limits as limits
from foundation.domain.submission import Submission, asked_submission
from foundation.errors import BadInput

if TYPE_CHECKING:  # pragma: no cover
    from farm.submit_handle import SubmitHandle


def _coordinator(coordinator: str | Coordinator | None) -> Coordinator | None:
    """A coordinator given as "host:port" (its token from FARM_TOKEN, if any) or as a Coordinator."""
    if coordinator is None:
        return None
    if isinstance(coordinator, Coordinator):
        return coordinator if coordinator.address else None
    if isinstance(coordinator, str):
        return Coordinator(coordinator) if coordinator else None
    raise BadInput(f"coordinator must be 'host:port' or a farm.Coordinator, not {type(coordinator).__name__}",
                   'e.g. coordinator="coord:50051"')


def submit(model: str, target: str = "llvm", batch: int = 1, *, trials: int | None = None,
           trials_per_task: int | None = None, retune: bool = False, reuse: str | None = None,
           warm_start: bool = True, seed: int = 0, runs: int = 20, weights_layout: str = "auto",
           until: str | None = None, patience: int | None = None, round_trials: int | None = None,
           build_workers: int | None = None, registry: str | None = None,
           coordinator: str | Coordinator | None = None, fingerprint: str | None = None, wait: bool = True,
           timeout: float | None = None, shapes: dict | None = None, example_inputs=None) -> "Job | SubmitHandle":
    """Tune ``model`` for ``target`` at ``batch`` (or answer from the registry), as `farm submit` does.

    Without ``coordinator`` the job runs here, in this process, on ``registry`` (default: the
    farm's SQLite file), and returns when it ends; with ``wait=False`` it returns at once a
    farm.submit_handle.SubmitHandle of the job running in a background thread (its progress
    events, ``wait()``, ``cancel()``). With a coordinator, its agents run it; ``wait`` follows
    it until it ends (or ``timeout`` seconds pass), else it returns queued.
    A coordinator with agents of several fingerprints for the target starts one job for each
    (``fingerprint`` picks one): this returns the first, and ``farm.jobs()`` lists them all.
    Embedded, ``fingerprint`` names the compatible fingerprint (this CPU at another size) whose
    library may answer; by default this box's, else the nearest compatible one's.

    ``model`` is a zoo name, an ONNX file's path, an onnx.ModelProto (``shapes`` sizes its named
    dimensions: {"sequence": 128}, or {"input_ids": [1, 128]}), or a torch.nn.Module exported on
    ``example_inputs`` (a tuple of tensors; the torch extra).

    The job comes back however it ended: check ``job.succeeded`` and ``job.error``. Bad input
    raises foundation.errors.BadInput (a FarmError, as every refusal here is).
    """
    from farm.model_sources import model_source
    from foundation.models.loaded import check_batch

    # The environment's yes/no switches first, as `farm` checks them: one read late (FARM_KEEP_SLOWER_TUNED,
    # after the tuning) would fail the job it was meant for.
    check_switches()
    target = arguments.target_text(target)
    check_batch(batch)
    # What is asked, checked as `farm submit` and the coordinator check theirs; the model, which may be
    # an object here, is keyed once everything else has passed (model_source may store it).
    submission = asked_submission(
        model="", target=target, batch=batch, trials=trials, trials_per_task=trials_per_task, retune=retune,
        reuse=reuse, seed=seed, warm_start=warm_start, runs=runs,
        weights_layout="auto" if weights_layout is None else weights_layout, until=until, patience=patience,
        round_trials=round_trials, build_workers=build_workers, fingerprint=fingerprint)
    wait = arguments.flag("wait", wait)
    registry = arguments.optional_text("registry", registry, 'registry="sqlite:///farm.db"', limits.MAX_TEXT_LENGTH)
    timeout = arguments.seconds("timeout", timeout)
    remote = _coordinator(coordinator)
    source = model_source(model, batch, shapes, example_inputs)
    submission = replace(submission, model=source.named)
    if remote is not None:
        if source.key is not None and source.key.source != "onnx":
            raise BadInput("a torch module is tuned embedded only", "export it to ONNX to tune it on a coordinator")
        return _submit_remote(remote.client(), submission, wait=wait, timeout=timeout)
    from farm.api_interrupts import cancelled_at_exit, ctrl_c_cancels
    from farm.embedded import submit as submit_job
    from farm.registry_jobs import RegistryJobs
    from farm.submit_values import SubmitRequest
    from foundation.meta_schedule.measure import MeasureSettings

    request = SubmitRequest.of(submission, registry=registry, model=source.request,
                               measure=MeasureSettings(build_workers=build_workers))
    if not wait:  # runs in a background thread of this process: its events, wait() and cancel()
        from farm.submit_handle import SubmitHandle

        return cancelled_at_exit(SubmitHandle(request, lambda job_id: status(job_id, registry=registry)))
    with ctrl_c_cancels() as ctrl_c:
        result = submit_job(request, cancellation=ctrl_c.cancellation)
        ctrl_c.ended(result.job)
    jobs = RegistryJobs.open(registry)
    return Job.from_document(jobs.document(jobs.get(result.job.id)))


def status(job_id: str, *, registry: str | None = None, coordinator: str | Coordinator | None = None) -> Job:
    """One job: a coordinator's, or the registry's (a job whose process died is marked failed first)."""
    job_id = arguments.optional_text("job_id", job_id, 'farm.status("job-...")')
    if not job_id:
        raise BadInput("job_id is required", "pass a job's id, as farm.submit's Job.id or farm.jobs() gives it")
    registry = arguments.optional_text("registry", registry, 'registry="sqlite:///farm.db"', limits.MAX_TEXT_LENGTH)
    remote = _coordinator(coordinator)
    if remote is not None:
        from farm.client import job_json

        return Job.from_document(job_json(remote.client().get_job(job_id)))
    from farm.registry_jobs import RegistryJobs

    jobs = RegistryJobs.open(registry)
    return Job.from_document(jobs.document(jobs.get(job_id)))


def cancel(job_id: str, *, registry: str | None = None, coordinator: str | Coordinator | None = None,
           wait: float = 60.0) -> Job:
    """Cancel a job, as `farm cancel` does: a coordinator's (its agents stop that work), or the registry's: one that
    another process runs embedded is asked to stop after the batch in flight, and this waits up to ``wait`` seconds
    for it (TimedOut, exit 5, if it is still running then; the job goes on to stop)."""
    from foundation.errors import TimedOut

    job_id = arguments.optional_text("job_id", job_id, 'farm.cancel("job-...")')
    if not job_id:
        raise BadInput("job_id is required", "pass a job's id, as farm.submit's Job.id or farm.jobs() gives it")
    registry = arguments.optional_text("registry", registry, 'registry="sqlite:///farm.db"', limits.MAX_TEXT_LENGTH)
    wait = arguments.seconds("wait", wait)
    remote = _coordinator(coordinator)
    if remote is not None:
        from farm.client import job_json

        return Job.from_document(job_json(remote.client().cancel(job_id, "cancelled by the user")))
    from farm.registry_jobs import RegistryJobs

    registry_jobs = RegistryJobs.open(registry)
    job = registry_jobs.cancel(job_id, wait)
    if not job.state.is_final:
        raise TimedOut(f"job {job_id} was asked to stop, and is still {job.state} after {wait:g} s",
                       f"its process stops after the batch in flight; see farm.status({job_id!r})")
    return Job.from_document(registry_jobs.document(job))


def jobs(limit: int = 20, *, registry: str | None = None, coordinator: str | Coordinator | None = None) -> list[Job]:
    """The newest ``limit`` jobs, newest first: a coordinator's, or the registry's."""
    limits.check_number("limit", limit, limits.LIST_LIMIT, "e.g. farm.jobs(limit=20)")
    registry = arguments.optional_text("registry", registry, 'registry="sqlite:///farm.db"', limits.MAX_TEXT_LENGTH)
    remote = _coordinator(coordinator)
    if remote is not None:
        from farm.client import job_json

        return [Job.from_document(job_json(j)) for j in remote.client().list_jobs(limit)]
    from farm.registry_jobs import RegistryJobs

    registry_jobs = RegistryJobs.open(registry)
    return [Job.from_document(registry_jobs.document(j)) for j in registry_jobs.list(limit)]


def _submit_remote(client, submission: Submission, *, wait: bool, timeout: float | None) -> Job:
    from farm.client import job_json

    submitted = [s.job for s in client.submit(submission)]
    deadline = None if timeout is None else time.monotonic() + timeout
    if wait:
        for job in submitted:
            for _ in client.watch(job.id, deadline):
                pass  # the stream ends when the job is final, or at the deadline
        submitted = [client.get_job(job.id) for job in submitted]
    return Job.from_document(job_json(submitted[0]))

