"""The embedded farm: a whole job (hit lookup, tuning, build, validation, commit) in-process.

This composes the foundation's parts on one box: the registry, task extraction and builds,
the fingerprint, the tuner and validation, with the job driver (foundation.job_driver)
moving the job through its states exactly as the coordinator does. It is what `farm submit`
does when no coordinator is configured.

Nothing is lost and nothing is stuck:
- the job records this process as its runner and beats a heartbeat, so a reader fails the
  job if this process dies (foundation.job_driver.runners), keeping the records measured;
- a cancel (a signal, or `farm cancel` read by the heartbeat) stops tuning after the batch
  in flight, whose records are committed, and ends the job `cancelled`;
- a second submit of a scope being tuned waits for the first (the tuning lock) and answers
  from the registry: one scope is never tuned twice at once;
- submits from several threads of one process run their jobs one at a time (TVM's IR is the
  process's: foundation.tvm_ir_lock); a registry hit waits for nothing.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from farm.embedded_site import tune_build_commit
from farm.session import FarmContext, open_context
from farm.submit_values import JobObserver, SubmitRequest, SubmitResult
from foundation import config
from foundation.domain.weights_layout import (
    AUTO,
    WeightsLayout,
    auto_forms,
    check_request,
    weights_layout_for,
)
from foundation.errors import FarmError, Interrupted
from foundation.job_driver.admission import answered_by
from foundation.job_driver.artifacts import (
    look_up_fastest_hit,
    look_up_hit,
)
from foundation.job_driver.cancellation import Cancellation
from foundation.job_driver.library_scopes import LibraryScope, library_scopes
from foundation.job_driver.runners import fail_dead_jobs, this_runner
from foundation.job_driver.tuning_lock import ScopeLock, scope_key
from foundation.job_driver.tuning_rounds import check_until
from foundation.models.model_key import ModelKey, model_key
from foundation.processes.process_limit import check_room_for_a_job
from foundation.processes.scratch_space import check_scratch_space
from foundation.tvm_ir_lock import TVM_IR_LOCK

if TYPE_CHECKING:  # pragma: no cover
    from foundation.registry.entities import Artifact

# How often a submit waiting for another thread's job looks at its own cancellation.
TURN_POLL_S = 0.5


def submit(request: SubmitRequest, observer: JobObserver | None = None,
           cancellation: Cancellation | None = None) -> SubmitResult:
    """Answer from the registry if it can; otherwise tune, build, validate and commit.

    Returns the job however it ended (succeeded, failed, cancelled); raises FarmError for
    bad input, and Interrupted when cancelled before a job existed.
    """
    begin = time.monotonic()
    cancellation = cancellation or Cancellation()
    tell = observer.stage if observer else (lambda state, detail: None)
    key = request.model if isinstance(request.model, ModelKey) else model_key(request.model, request.batch)
    if key.source == "onnx":  # a file that is no ONNX model is refused before the registry is opened or made
        from foundation.models.onnx_import import read_model

        read_model(key.path)
    check_request(request.weights_layout)
    spec = request.job_spec()
    if request.until is not None:
        check_until(request.until)
    # An embedded submit tunes here: a target this CPU cannot run is refused before anything.
    ctx = open_context(request.registry, request.target, create=True, tuning_here=True)
    layout = weights_layout_for(request.weights_layout, ctx.target["kind"])
    if request.warm_start:
        _load_shipped_packs(ctx, tell)
    for job in fail_dead_jobs(ctx.store):
        tell("cleaned", f"{job.id} was left running by a process that died: marked failed")
    lock = ScopeLock(ctx.store, scope_key(key, ctx.target_json, ctx.fingerprint.id, ctx.tvm_version),
                     f"{key.describe()} for {ctx.target_json} on {ctx.fingerprint.id}", this_runner())
    waited_for: str | None = None
    has_turn = False
    try:
        while True:
            _stop_if_cancelled(cancellation)
            hit = _verified_hit(ctx, key, request, layout, waited_for, tell)
            if hit is not None:
                job, choice = answered_by(ctx.store, hit, spec, layout, ctx.target_json, ctx.fingerprint.id)
                return SubmitResult(job, True, ctx.fingerprint.id, key, ctx.target_json, hit, choice.chosen,
                                    seconds=time.monotonic() - begin, layout_choice=choice)
            if not has_turn:
                waited = _take_turn(cancellation, tell)
                has_turn = True
                if waited:
                    continue  # the job it waited for may have made the library this one wants
            # The scope lock tells runners apart, not threads: this process's other jobs wait above.
            holder = lock.try_take()
            if holder is None:
                break
            tell("waiting", f"{holder.job_id or 'another submit'} ({holder.runner.describe()}) is tuning "
                            f"{key.describe()} for this target: waiting for it to finish")
            holder = lock.wait_released(holder, cancellation.event)
            waited_for = holder.job_id or "another submit"
        check_room_for_a_job()  # a process limit too low fails a job anywhere, even ends the process
        check_scratch_space("a tuning job")  # its candidates and library are built there
        return tune_build_commit(ctx, key, request, spec, layout, lock, observer, cancellation, begin)
    finally:
        lock.release()
        if has_turn:
            TVM_IR_LOCK.release()


def _take_turn(cancellation: Cancellation, tell) -> bool:
    """This thread's turn to run a job in this process (foundation.tvm_ir_lock); whether it waited for
    another thread's job to end first."""
    if TVM_IR_LOCK.acquire(blocking=False):
        return False
    waiting = ("another farm.submit in this process is running its job: waiting for it to end "
               "(one job at a time in a process: TVM's IR builders are not thread-safe)")
    tell("waiting", waiting)
    # A Python caller has no observer: Python's last-resort handler prints a warning on stderr.
    logging.getLogger(__name__).warning(waiting)
    while not TVM_IR_LOCK.acquire(timeout=TURN_POLL_S):
        _stop_if_cancelled(cancellation)
    return True


def _load_shipped_packs(ctx: FarmContext, tell) -> None:
    """A new registry starts with what tvm-farm ships (foundation.registry.shipped_packs)."""
    from foundation.registry.shipped_packs import is_new, load_shipped_packs, shipped_packs

    if not config.shipped_packs_wanted() or not shipped_packs() or not is_new(ctx.store):
        return
    for name, counts in load_shipped_packs(ctx.store).items():
        tell("packs", f"{name}: {counts.records:,} records of {counts.fingerprints} fingerprints into the new registry")


def _verified_hit(ctx: FarmContext, key: ModelKey, request: SubmitRequest, layout: WeightsLayout,
                  waited_for: str | None, tell) -> "Artifact | None":
    """The artifact to answer with: the newest intact one; with --retune only after waiting
    for another submit, and only the one that submit committed."""
    if request.retune and waited_for is None:
        return None
    own = LibraryScope(ctx.fingerprint.id, ctx.target_json)
    # Without a library of its own, a box is answered by one of the same hardware at another size
    # (or the one --fingerprint names); --retune is answered only by the one its wait ended on.
    scopes = [own] if request.retune else library_scopes(
        ctx.store, ctx.target_json, ctx.fingerprint.id, ctx.fingerprint.details, chosen=request.fingerprint)
    for scope in scopes:
        if request.weights_layout == AUTO:  # auto is answered by the fastest library of any form it may take
            lookup = look_up_fastest_hit(ctx.store, key, scope.target_json, scope.fingerprint_id, ctx.tvm_version,
                                         auto_forms(ctx.target["kind"]))
        else:
            lookup = look_up_hit(ctx.store, key, scope.target_json, scope.fingerprint_id, ctx.tvm_version, layout)
        for bad in lookup.invalidated:
            tell("invalid", f"artifact {bad.id} is corrupt ({bad.invalid_reason}): marked invalid, never a hit again")
        if lookup.artifact is None:
            continue
        if request.retune:
            return lookup.artifact if lookup.artifact.job_id == waited_for else None
        if not scope.is_own(ctx.fingerprint.id):
            # The job answered here is this box's: its fingerprint may be new to the registry.
            fp = ctx.fingerprint
            ctx.store.upsert_fingerprint(fp.id, fp.kind, fp.summary, fp.details)
            tell("compatible", f"answered by the library tuned on {scope.fingerprint_id}, this CPU at another size "
                               f"(`farm run` times it here; `--retune` tunes one for {ctx.fingerprint.id})")
        return lookup.artifact
    return None


def _stop_if_cancelled(cancellation: Cancellation) -> None:
    if cancellation.is_set():
        raise Interrupted(f"{cancellation.reason} before any job started", "nothing was written",
                          signum=cancellation.signum or 2)


__all__ = ["Cancellation", "FarmError", "SubmitRequest", "SubmitResult", "submit"]
