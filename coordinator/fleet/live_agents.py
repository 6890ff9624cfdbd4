"""What the coordinator keeps in memory about agents, so that heartbeats and idle polls need no SQL.

Everything here is a cache of the registry or a write on its way there, never the only copy
of a decision:

- who the agents are (fingerprint, target kinds, TVM version): rows that only change when an
  agent registers, which goes through this coordinator;
- when each agent last beat, written back in one statement per tick (`flush`) before the
  tick decides which agents went silent;
- which agents' lease lists matched the registry, and at which version of that agent's leases
  (`UnitOfWork.lease_version`, whose contract foundation.registry.session states): the same
  list at the same version needs no second look;
- which (fingerprint, target kind) pairs have pending shards, and which pending validations,
  at a state version.

One coordinator serves a registry (it also owns the tracker agents measure through): these
caches rely on every state change going through its units of work.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime

from coordinator.cluster_store import ClusterStore
from foundation.errors import RegistryError
from foundation.registry.entities import Agent

logger = logging.getLogger("farm.coordinator")

# A settled lease list or pending-work answer is re-read at least this often, whatever the
# state version says: a bound on how long a change made outside this process goes unnoticed.
# (Several heartbeat intervals: a bound at one interval would re-read at every beat.) Each
# lease list keeps for a random share of it, at least half: agents whose lists settled together
# (a fleet leasing a new job's shards) would otherwise all be re-read at the same beat.
MAX_SETTLED_AGE_S = 60.0
MAX_PENDING_AGE_S = 5.0
# The pending-work answer is re-read at most this often while states keep changing (a lease
# burst changes them hundreds of times a second); an idle agent polls once a second anyway.
MIN_PENDING_REFRESH_S = 0.25


@dataclass(frozen=True)
class KnownAgent:
    id: str
    fingerprint_id: str
    target_kinds: frozenset[str]
    tvm_version: str


class LiveAgents:
    """Agents as the coordinator last saw them; thread-safe."""

    def __init__(self, cluster: ClusterStore, state_version: Callable[[], int],
                 lease_version: Callable[[str], Hashable], pending_refresh: float = MIN_PENDING_REFRESH_S):
        self._cluster = cluster
        self._pending_refresh = pending_refresh
        self._state_version = state_version
        self._lease_version = lease_version  # what a settled lease list is cached with
        self._lock = threading.Lock()
        self._known: dict[str, KnownAgent] = {}
        self._beats: dict[str, datetime] = {}
        self._settled: dict[str, tuple[frozenset, Hashable, float]] = {}  # list, version, good until
        # {"shard": pairs, "validation": pairs}, state version, when read
        self._pending: tuple[dict[str, frozenset[tuple[str, str]]], int, float] | None = None
        self._refreshing = False

    # ------------------------------------------------------------------ who they are
    def note_registered(self, agent: Agent) -> None:
        with self._lock:
            self._known[agent.id] = _known(agent)
            self._settled.pop(agent.id, None)

    def cached(self, agent_id: str) -> KnownAgent | None:
        """The agent if this process has seen it; None says nothing about the registry."""
        with self._lock:
            return self._known.get(agent_id)

    def known(self, agent_id: str) -> KnownAgent | None:
        """The agent, or None if the registry has never heard of it (it must register)."""
        found = self.cached(agent_id)
        if found is not None:
            return found
        agent = self._cluster.agents.get_agent(agent_id)  # registered before this process started
        if agent is None:
            return None
        with self._lock:
            return self._known.setdefault(agent_id, _known(agent))

    # ------------------------------------------------------------------ heartbeats
    def beat(self, agent_id: str, at: datetime) -> None:
        with self._lock:
            self._beats[agent_id] = at

    def flush(self) -> int:
        """Write the beats collected since the last flush; returns how many."""
        with self._lock:
            beats, self._beats = self._beats, {}
        try:
            self._cluster.agents.record_heartbeats(beats)
        except BaseException:
            with self._lock:  # keep them for the next flush, unless a newer beat came
                for agent_id, at in beats.items():
                    if agent_id not in self._beats or self._beats[agent_id] < at:
                        self._beats[agent_id] = at
            raise
        return len(beats)

    def version(self) -> int:
        """The state version to read before a read whose result is cached with it."""
        return self._state_version()

    def lease_version(self, agent_id: str) -> Hashable:
        """`version` for a read of one agent's leases: to read before it, cache with it."""
        return self._lease_version(agent_id)

    def is_settled(self, agent_id: str, running: frozenset, version: Hashable) -> bool:
        """Whether ``running`` is exactly the lease list that matched the registry at ``version``."""
        with self._lock:
            cached = self._settled.get(agent_id)
        return (cached is not None and cached[0] == running and cached[1] == version
                and time.monotonic() < cached[2])

    def note_settled(self, agent_id: str, running: frozenset, version: Hashable) -> None:
        with self._lock:
            self._settled[agent_id] = (running, version,
                                       time.monotonic() + MAX_SETTLED_AGE_S * random.uniform(0.5, 1.0))

    # ------------------------------------------------------------------ pending work
    def may_have_work(self, fingerprint_id: str, target_kinds: Iterable[str], *, wait: bool = True,
                      work: str = "shard") -> bool:
        """Whether a running job of this fingerprint and one of these kinds has a pending shard
        (``work="validation"``: a validating job, a validation waiting for an agent).

        A False may be a quarter of a second late; a True only means a claim is worth a try.
        ``wait=False`` (for the server's event loop, which must not wait on the registry):
        an answer due for a refresh is refreshed in a thread and used meanwhile, and with
        no answer yet the claim is tried.
        """
        now = time.monotonic()
        version = self._state_version()
        with self._lock:
            cached = self._pending
        age = now - cached[2] if cached is not None else None
        if age is None or age >= MAX_PENDING_AGE_S or (cached[1] != version and age >= self._pending_refresh):
            if wait:
                cached = self._refresh_pending(version, now)
            else:
                self._refresh_pending_soon(version, now)
                if cached is None:
                    return True
        pending = cached[0][work]
        return any((fingerprint_id, kind) in pending for kind in target_kinds)

    def _refresh_pending(self, version: int, now: float):
        pending = {"shard": frozenset(self._cluster.leases.pending_work()),
                   "validation": frozenset(self._cluster.validations.pending_validations())}
        cached = (pending, version, now)
        with self._lock:
            self._pending = cached
        return cached

    def _refresh_pending_soon(self, version: int, now: float) -> None:
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True

        def refresh() -> None:
            try:
                self._refresh_pending(version, now)
            except RegistryError as err:  # the registry is away: the server's health says so, once
                logger.debug("reading which jobs have pending shards failed: %s", err)
            except Exception:
                logger.warning("reading which jobs have pending shards failed", exc_info=True)
            finally:
                with self._lock:
                    self._refreshing = False

        threading.Thread(target=refresh, name="farm-pending-work", daemon=True).start()


def _known(agent: Agent) -> KnownAgent:
    return KnownAgent(agent.id, agent.fingerprint_id, frozenset(agent.target_kinds), agent.tvm_version)
