"""The embedded farm: a whole job (hit lookup, tuning, build, validation, commit) in-process.

This composes the foundation's parts on one box: the registry, task extraction and builds,
the fingerprint, the tuner and validation, with the job driver (foundation.job_driver)
moving the job through its states exactly as the coordinator does. It is what `farm submit`
does when no coordinator is configured. A submit goes through three parts, once each and in order:
its context (farm.session: the request checked and narrowed to typed values, the registry opened),
its admission (foundation.job_driver.embedded_admission: answered from the registry, or this
process's turn to tune the scope), and the job run here (farm.embedded_site).

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

import time

from farm.embedded_site import tune_build_commit
from farm.session import open_submit
from farm.submit_values import JobObserver, SubmitRequest, SubmitResult
from foundation.job_driver.cancellation import Cancellation
from foundation.job_driver.embedded_admission import EmbeddedAdmission


def submit(request: SubmitRequest, observer: JobObserver | None = None,
           cancellation: Cancellation | None = None) -> SubmitResult:
    """Answer from the registry if it can; otherwise tune, build, validate and commit.

    Returns the job however it ended (succeeded, failed, cancelled); raises FarmError for
    bad input, and Interrupted when cancelled before a job existed.
    """
    begin = time.monotonic()
    cancellation = cancellation or Cancellation()
    tell = observer.stage if observer else (lambda state, detail: None)
    # An embedded submit tunes here: a target this CPU cannot run is refused before anything.
    ctx, asked = open_submit(request)
    admission = EmbeddedAdmission(ctx, asked, tell, cancellation)
    with admission:
        answered = admission.answer()
        if answered is not None:
            return SubmitResult(answered.job, True, ctx.fingerprint.id, asked.key, ctx.target_json,
                                answered.artifact, answered.choice.chosen, seconds=time.monotonic() - begin,
                                layout_choice=answered.choice)
        return tune_build_commit(ctx, admission, request.measure, observer, cancellation, begin)

