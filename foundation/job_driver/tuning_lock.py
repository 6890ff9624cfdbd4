"""One tuning per scope at a time: a registry row that a second submit of the same job waits on.

The scope is what an artifact answers for: (model name, batch, source digest, target,
fingerprint, TVM version). The lock is a row with that scope's key as its primary key
(foundation.registry.schema.TuningLockRow), so it works alike on SQLite and PostgreSQL and
across hosts sharing a registry. Its holder is a runner; a holder that died is judged by
the same rule as its job (foundation.domain.runners) and its lock is taken over.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import TYPE_CHECKING

from foundation.clock import utc_now
from foundation.domain.runners import Runner
from foundation.job_driver.runners import gone_reason

if TYPE_CHECKING:  # pragma: no cover
    from foundation.models.model_key import ModelKey
    from foundation.registry.entities import TuningLock
    from foundation.registry.store import RegistryStore

POLL_S = 1.0


def scope_key(key: "ModelKey", target_json: str, fingerprint_id: str, tvm_version: str) -> str:
    scope = [key.name, key.batch, key.source_digest, target_json, fingerprint_id, tvm_version]
    return hashlib.sha256(json.dumps(scope, separators=(",", ":")).encode()).hexdigest()


class ScopeLock:
    """The tuning lock of one scope, as seen by one runner."""

    def __init__(self, store: "RegistryStore", scope: str, description: str, runner: Runner):
        self.store = store
        self.scope = scope
        self.description = description
        self.runner = runner
        self.held = False

    def try_take(self) -> "TuningLock | None":
        """Take the lock; None once this runner holds it, else its live holder."""
        while True:
            holder = self.store.runners.take_tuning_lock(self.scope, self.description, self.runner, utc_now())
            if holder.runner == self.runner:
                self.held = True
                return None
            if gone_reason(holder.runner, holder.heartbeat_at) is None:
                return holder
            if self.store.runners.take_over_tuning_lock(holder, self.runner, utc_now()):
                self.held = True
                return None
            # Someone else took it over first, or it was released: look again.

    def wait_released(self, holder: "TuningLock", cancelled: threading.Event,
                      poll: float = POLL_S) -> "TuningLock":
        """Wait until ``holder`` no longer holds the lock (it finished, or died), or ``cancelled``;
        returns the holder as last seen (its job id is known once it created its job)."""
        while not cancelled.wait(poll):
            now = self.store.runners.get_tuning_lock(self.scope)
            if now is None or now.runner != holder.runner:
                return holder
            holder = now
            if gone_reason(now.runner, now.heartbeat_at) is not None:
                return holder
        return holder

    def name_job(self, job_id: str) -> None:
        self.store.runners.name_tuning_lock_job(self.scope, self.runner, job_id)

    def release(self) -> None:
        if self.held:
            self.store.runners.release_tuning_lock(self.scope, self.runner)
            self.held = False
