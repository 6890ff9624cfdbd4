"""The runners of embedded jobs: who this process is, whether another is gone, failing dead jobs.

The rule is foundation.domain.runners'; this module observes what it needs (this host's
name, the process table) and applies it to the registry. Any command that reads jobs calls
`fail_dead_jobs` first, so a job whose `farm submit` was killed shows as failed, not as
running forever; the records it committed stay in the registry.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import psutil

from foundation.clock import utc_now
from foundation.domain.runners import HEARTBEAT_INTERVAL_S, HEARTBEAT_TTL_S, Runner, runner_gone
from foundation.job_driver.driver import JobDriver, RegistryJobMoves
from foundation.processes.start_times import process_start_time

if TYPE_CHECKING:  # pragma: no cover
    from foundation.registry.entities import Job
    from foundation.registry.store import RegistryStore

logger = logging.getLogger("farm.job")

RUNNER_DIED = "runner died"


def host_name() -> str:
    return socket.gethostname()


@functools.lru_cache(maxsize=1)
def _this_runner(pid: int) -> Runner:
    started_at = process_start_time(pid)
    if started_at is None:  # only where this process's own entry cannot be read: psutil's reading
        started_at = psutil.Process(pid).create_time()
    return Runner(host_name(), pid, started_at)


def this_runner() -> Runner:
    """This process as the runner of a job (computed once per process; a fork gets its own)."""
    return _this_runner(os.getpid())


def gone_reason(runner: Runner, heartbeat_at: dt.datetime, now: dt.datetime | None = None,
                ttl: float = HEARTBEAT_TTL_S) -> str | None:
    """Why ``runner`` is gone, judged from this process (foundation.domain.runners.runner_gone)."""
    here = host_name()
    return runner_gone(
        runner, heartbeat_at.timestamp(), (now or utc_now()).timestamp(), here=here,
        start_time_here=process_start_time(runner.pid) if runner.host == here else None, ttl=ttl,
    )


def fail_dead_jobs(store: "RegistryStore", now: dt.datetime | None = None) -> list["Job"]:
    """Fail every unfinished embedded job whose runner is gone; the jobs failed by this call."""
    failed = []
    for job in store.unfinished_jobs_with_runner():
        reason = gone_reason(job.runner, job.heartbeat_at or job.created_at, now)
        if reason is None:
            continue
        driver = JobDriver(RegistryJobMoves(store), job.id, job.state)
        if driver.fail(f"{RUNNER_DIED}: {reason}; the records it measured are kept", f"failed: {RUNNER_DIED}"):
            failed.append(store.get_job(job.id))
    return failed


class Heartbeat:
    """A daemon thread that beats this runner's job and tuning lock every few seconds.

    A beat also reads the job's cancel request (`farm cancel` from another process) and
    passes it on to ``on_cancel_request`` once, and writes the trials measured so far (from
    ``count_trials``) to the job, so that `farm jobs` in another shell shows a running job's
    progress. A failed beat (the database away for a moment) is retried at the next one; the
    TTL allows for many.
    """

    def __init__(self, store: "RegistryStore", runner: Runner, on_cancel_request,
                 interval: float = HEARTBEAT_INTERVAL_S):
        self.store = store
        self.runner = runner
        self.job_id: str | None = None
        self.lock_scope: str | None = None
        self.interval = interval
        self._on_cancel_request = on_cancel_request
        self._told = False
        self._trials: Callable[[], int] | None = None
        self._trials_written: int | None = None
        # A beat in flight must not write its count after the job's final one.
        self._trials_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="farm-job-heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def count_trials(self, trials: Callable[[], int] | None) -> None:
        """Write ``trials()`` to the job at each beat from now on; None stops it (before the
        job's own final count is written)."""
        with self._trials_lock:
            self._trials = trials

    def beat(self) -> None:
        if self.job_id is None and self.lock_scope is None:
            return
        cancel = self.store.runners.beat(self.runner, utc_now(), job_id=self.job_id, lock_scope=self.lock_scope)
        if cancel and not self._told:
            self._told = True
            self._on_cancel_request()
        with self._trials_lock:
            if self._trials is not None and self.job_id is not None:
                trials = self._trials()
                if trials != self._trials_written:
                    self.store.update_job(self.job_id, trials_done=trials)
                    self._trials_written = trials

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception:  # the next beat tries again; a lapse is what the TTL allows for
                logger.debug("heartbeat of %s failed", self.job_id, exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.interval + 5)
