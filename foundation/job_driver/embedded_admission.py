"""An embedded submit's admission: what it asks checked before anything is written, then answered from the
registry, or this process holding the scope's tuning lock and its turn to run the job, whose rows it writes
(farm.embedded_site runs it).

Nothing is tuned twice, and nothing waits for nothing:
- a second submit of a scope being tuned waits for the first (the tuning lock, foundation.job_driver.tuning_lock)
  and is answered from the registry: one scope is never tuned twice at once;
- submits from several threads of one process run their jobs one at a time (TVM's IR is the process's:
  foundation.tvm_ir_lock); a registry hit waits for neither.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from foundation import config
from foundation.domain.job_spec import EMBEDDED, JobSpec
from foundation.domain.weights_layout import LayoutChoice, check_request
from foundation.errors import Interrupted
from foundation.job_driver.admission import AskedJob, model_row, new_job_options
from foundation.job_driver.cancellation import Cancellation
from foundation.job_driver.hits import LibraryScope, answered_by, first_hit, library_scopes
from foundation.job_driver.runners import fail_dead_jobs, this_runner
from foundation.job_driver.tuning_lock import ScopeLock, scope_key
from foundation.job_driver.tuning_rounds import check_until
from foundation.models.model_key import ModelKey, named_model_key
from foundation.processes.process_limit import check_room_for_a_job
from foundation.processes.scratch_space import check_scratch_space
from foundation.tvm_ir_lock import TVM_IR_LOCK

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.submission import Submission
    from foundation.hardware.fingerprint import Fingerprint
    from foundation.models.loaded import LoadedModel
    from foundation.registry.entities import Artifact, Job
    from foundation.registry.store import RegistryStore

# A Python caller's log names the embedded farm, whose submit waits here.
logger = logging.getLogger("farm.embedded")

# How often a submit waiting for another thread's job looks at its own cancellation.
TURN_POLL_S = 0.5

Tell = Callable[[str, str], None]


class TuningHere(Protocol):
    """The box a job is tuned on and the registry that keeps it (farm.session.FarmContext)."""

    store: "RegistryStore"
    fingerprint: "Fingerprint"
    target: dict
    target_json: str
    tvm_version: str


def keyed_here(model: "str | ModelKey", batch: int) -> ModelKey:
    """The key of the model named here, or keyed here already (in memory: farm.model_sources); a file that is
    no ONNX model is refused before the registry is opened or made."""
    key = model if isinstance(model, ModelKey) else named_model_key(model, batch)
    if key.source == "onnx":
        from foundation.models.onnx_import import read_model

        read_model(key.path)
    return key


def embedded_spec(submission: "Submission") -> JobSpec:
    """What an embedded job is asked to do, each value checked (BadInput); a goal this box cannot time too."""
    check_request(submission.weights_layout)
    spec = submission.job_spec(EMBEDDED)
    if spec.until is not None:
        check_until(spec.until)
    return spec


@dataclass(frozen=True)
class Answered:
    """A submit answered from the registry: the job recorded for it, the library and the form it answers in."""

    job: "Job"
    artifact: "Artifact"
    choice: LayoutChoice


class EmbeddedAdmission:
    """One embedded submit's way in, as a context manager: leaving it releases the scope's tuning lock and this
    process's turn, whichever it holds."""

    def __init__(self, here: TuningHere, asked: AskedJob, tell: Tell, cancellation: Cancellation):
        self.here = here
        self.asked = asked
        self.tell = tell
        self.cancellation = cancellation
        key, fp = asked.key, here.fingerprint
        self.lock = ScopeLock(here.store, scope_key(key, here.target_json, fp.id, here.tvm_version),
                              f"{key.describe()} for {here.target_json} on {fp.id}", this_runner())
        self._has_turn = False

    def __enter__(self) -> "EmbeddedAdmission":
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()
        if self._has_turn:
            TVM_IR_LOCK.release()
            self._has_turn = False

    def answer(self) -> Answered | None:
        """The registry's answer; None once this process holds the scope's tuning lock and its turn to run the
        job, with room for it. Interrupted when cancelled first."""
        here, asked, tell = self.here, self.asked, self.tell
        if asked.spec.warm_start:
            self._load_shipped_packs()
        for job in fail_dead_jobs(here.store):
            tell("cleaned", f"{job.id} was left running by a process that died: marked failed")
        waited_for: str | None = None
        while True:
            self._stop_if_cancelled()
            hit = self._verified_hit(waited_for)
            if hit is not None:
                job, choice = answered_by(here.store, hit, asked.spec, asked.layout, here.target_json,
                                          here.fingerprint.id)
                return Answered(job, hit, choice)
            if not self._has_turn and self._take_turn():
                continue  # the job it waited for may have made the library this one wants
            # The scope lock tells runners apart, not threads: this process's other jobs wait above.
            holder = self.lock.try_take()
            if holder is None:
                break
            tell("waiting", f"{holder.job_id or 'another submit'} ({holder.runner.describe()}) is tuning "
                            f"{asked.key.describe()} for this target: waiting for it to finish")
            holder = self.lock.wait_released(holder, self.cancellation.event)
            waited_for = holder.job_id or "another submit"
        check_room_for_a_job()  # a process limit too low fails a job anywhere, even ends the process
        check_scratch_space("a tuning job")  # its candidates and library are built there
        return None

    def new_job(self, loaded: "LoadedModel") -> "Job":
        """The job this process runs once ``answer`` found none: its fingerprint's, model's and job's rows, with
        this process as its runner, and the job named on the scope's lock."""
        here, asked, fp = self.here, self.asked, self.here.fingerprint
        store = here.store
        store.upsert_fingerprint(fp.id, fp.kind, fp.summary, fp.details)
        model = model_row(store, asked.key, loaded)
        job = store.create_job(model_id=model.id, target=here.target_json, fingerprint_id=fp.id, trials_budget=0,
                               options=new_job_options(asked.spec, asked.layout), runner=self.lock.runner)
        self.lock.name_job(job.id)
        return job

    def _take_turn(self) -> bool:
        """This thread's turn to run a job in this process; whether it waited for another thread's job first."""
        if TVM_IR_LOCK.acquire(blocking=False):
            self._has_turn = True
            return False
        waiting = ("another farm.submit in this process is running its job: waiting for it to end "
                   "(one job at a time in a process: TVM's IR builders are not thread-safe)")
        self.tell("waiting", waiting)
        # A Python caller has no observer: Python's last-resort handler prints a warning on stderr.
        logger.warning(waiting)
        while not TVM_IR_LOCK.acquire(timeout=TURN_POLL_S):
            self._stop_if_cancelled()
        self._has_turn = True
        return True

    def _load_shipped_packs(self) -> None:
        """A new registry starts with what tvm-farm ships (foundation.registry.shipped_packs)."""
        from foundation.registry.shipped_packs import is_new, load_shipped_packs, shipped_packs

        store = self.here.store
        if not config.shipped_packs_wanted() or not shipped_packs() or not is_new(store):
            return
        for name, counts in load_shipped_packs(store).items():
            self.tell("packs", f"{name}: {counts.records:,} records of {counts.fingerprints} fingerprints "
                               "into the new registry")

    def _verified_hit(self, waited_for: str | None) -> "Artifact | None":
        """The artifact to answer with: the newest intact one; with --retune only after waiting for another
        submit, and only the one that submit committed."""
        here, asked, fp = self.here, self.asked, self.here.fingerprint
        retune = asked.spec.retune
        if retune and waited_for is None:
            return None
        # Without a library of its own, a box is answered by one of the same hardware at another size
        # (or the one --fingerprint names); --retune is answered only by the one its wait ended on.
        scopes = [LibraryScope(fp.id, here.target_json)] if retune else library_scopes(
            here.store, here.target_json, fp.id, fp.details, chosen=asked.fingerprint)
        found = first_hit(here.store, asked.key, scopes, here.tvm_version, asked.hit_forms(here.target["kind"]))
        for bad in found.invalidated:
            self.tell("invalid", f"artifact {bad.id} is corrupt ({bad.invalid_reason}): marked invalid, "
                                 "never a hit again")
        if found.artifact is None or found.scope is None:
            return None
        if retune:
            return found.artifact if found.artifact.job_id == waited_for else None
        if not found.scope.is_own(fp.id):
            # The job answered here is this box's: its fingerprint may be new to the registry.
            here.store.upsert_fingerprint(fp.id, fp.kind, fp.summary, fp.details)
            self.tell("compatible", f"answered by the library tuned on {found.scope.fingerprint_id}, this CPU at "
                                    f"another size (`farm run` times it here; `--retune` tunes one for {fp.id})")
        return found.artifact

    def _stop_if_cancelled(self) -> None:
        cancellation = self.cancellation
        if cancellation.is_set():
            raise Interrupted(f"{cancellation.reason} before any job started", "nothing was written",
                              signum=cancellation.signum or 2)
