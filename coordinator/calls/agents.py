"""The coordinator's calls that keep agents on its books: registration and heartbeats."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from coordinator.cluster_store import ClusterStore
from coordinator.errors import AgentRefused, InvalidRequest
from coordinator.fleet import LiveAgents
from coordinator.hints import RpcServerFlags
from coordinator.ids import job_of_validation, rpc_key
from coordinator.values import CancelLease, LeaseRef, Registration, ReRegister, TrackerAddress
from foundation.clock import utc_now
from foundation.domain.jobs import JobState
from foundation.domain.validations import ValidationState
from foundation.errors import FarmError, NotFound
from foundation.registry.store import RegistryStore

if TYPE_CHECKING:  # pragma: no cover
    from foundation.hardware.fingerprint import Fingerprint


class AgentCalls:
    """Registration and heartbeats (over FarmAgent). A heartbeat is answered from memory when
    it can be (``live``); one that must read the registry re-queues the leases its agent lost."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, live: LiveAgents, rpc_servers: RpcServerFlags,
                 *, tvm_version: str, tracker: TrackerAddress, heartbeat_interval: float, lease_ttl: float,
                 max_attempts: int, wake: threading.Event):
        self._store = store
        self._cluster = cluster
        self._live = live
        self._rpc_servers = rpc_servers
        self._tvm_version = tvm_version
        self._tracker = tracker
        self._heartbeat_interval = heartbeat_interval
        self._lease_ttl = lease_ttl
        self._max_attempts = max_attempts
        self._wake = wake

    def register_agent(self, *, fingerprint_id: str, fingerprint_summary: str, fingerprint_json: str,
                       target_kinds: Sequence[str], hostname: str, tvm_version: str, address: str,
                       build_workers: int = 0, previous_agent_id: str = "") -> Registration:
        from foundation.hardware.targets import TUNABLE_KINDS

        if not fingerprint_id:
            raise InvalidRequest("the registration names no fingerprint", "send the box's fingerprint id")
        unknown = sorted(set(target_kinds) - set(TUNABLE_KINDS))
        if not target_kinds or unknown:
            shown = [k[:32] for k in target_kinds][:8]
            raise InvalidRequest(f"target kinds {shown} are not all tunable",
                                 f"use some of {', '.join(TUNABLE_KINDS)}")
        if tvm_version != self._tvm_version:
            raise AgentRefused(
                f"agent on {hostname or address} runs TVM {tvm_version}, the coordinator {self._tvm_version}; "
                "records are only comparable within one TVM version",
                f"install apache-tvm=={self._tvm_version} on the agent",
            )
        fingerprint = agent_fingerprint(fingerprint_id, fingerprint_json, target_kinds)
        self._store.upsert_fingerprint(fingerprint.id, fingerprint.kind, fingerprint.summary, fingerprint.details)
        agent = self._cluster.agents.register_agent(
            fingerprint_id=fingerprint_id, target_kinds=list(target_kinds), hostname=hostname, address=address,
            tvm_version=tvm_version, rpc_key=rpc_key(fingerprint_id),
            details={"build_workers": build_workers}, now=utc_now(), previous_agent_id=previous_agent_id or None,
        )
        self._live.note_registered(agent)
        self._wake.set()  # jobs waiting for this kind of agent can be bound now
        return Registration(agent, self._heartbeat_interval, self._lease_ttl,
                            self._tracker.host, self._tracker.port, agent.rpc_key)

    def heartbeat(self, agent_id: str, running: Sequence[LeaseRef], rpc_server_serving: bool = False,
                  sent_at: datetime | None = None) -> list[CancelLease | ReRegister]:
        """Note the agent alive; say which of its leases to stop, or that it must register.

        ``sent_at`` is when the agent listed its leases: a lease is only "lost" if it was
        granted well before that, not merely before this (possibly late) handling. This is
        the path that reads the registry: the server answers settled beats before it, from
        memory (`settled_heartbeat`).
        """
        now = utc_now()
        if self._live.known(agent_id) is None:
            return [ReRegister(f"agent {agent_id} is unknown to this coordinator; register again")]
        self._live.beat(agent_id, now)  # written back by the next tick
        self._rpc_servers.note(agent_id, rpc_server_serving)
        shards = [r for r in running if job_of_validation(r.shard_id) is None]
        listed = frozenset((r.shard_id, r.attempt) for r in shards)
        version = self._live.lease_version(agent_id)  # before the read the verdict comes from
        verdict = self._cluster.leases.reconcile_leases(
            agent_id, sorted(listed), now,
            grace=2 * self._heartbeat_interval, max_attempts=self._max_attempts,
            as_of=min(sent_at, now) if sent_at is not None else now,
        )
        if verdict.settled:
            self._live.note_settled(agent_id, listed, version)
        job_of = {r.shard_id: r.job_id for r in shards}
        instructions: list[CancelLease | ReRegister] = []
        for shard_id, attempt, reason in verdict.cancel:
            job_id = job_of[shard_id]
            instructions.append(CancelLease(LeaseRef(job_id, shard_id, attempt), self._why_stop(job_id, reason)))
        for ref in running:
            job_id = job_of_validation(ref.shard_id)
            if job_id is None:
                continue
            validation = self._cluster.validations.get_validation(job_id)
            if (validation is None or validation.attempt != ref.attempt
                    or validation.state is not ValidationState.LEASED or validation.agent_id != agent_id):
                instructions.append(CancelLease(
                    LeaseRef(job_id, ref.shard_id, ref.attempt),
                    self._why_stop(job_id, f"validation attempt {ref.attempt} of {job_id} is no longer current")))
        return instructions

    def settled_heartbeat(self, agent_id: str, running: Sequence[LeaseRef], rpc_server_serving: bool) -> bool:
        """Note a heartbeat that can be answered from memory, with nothing to say: a known
        agent listing exactly the shard leases the registry gave it at the current version
        of its leases (`UnitOfWork.lease_version`). False: `heartbeat` must read the registry.
        Takes no lock that waits on the registry, so the server answers it on its event loop
        (coordinator.servicer).
        """
        if self._live.cached(agent_id) is None:
            return False
        listed = frozenset((r.shard_id, r.attempt) for r in running)
        if any(job_of_validation(shard_id) is not None for shard_id, _ in listed):
            return False
        if not self._live.is_settled(agent_id, listed, self._live.lease_version(agent_id)):
            return False
        self._live.beat(agent_id, utc_now())  # written back by the next tick
        self._rpc_servers.note(agent_id, rpc_server_serving)
        return True

    def _why_stop(self, job_id: str, reason: str) -> str:
        try:
            job = self._store.get_job(job_id)
        except NotFound:
            return reason
        if job.state is JobState.CANCELLED:
            return f"job {job_id} was cancelled ({job.error or 'no reason given'})"
        if job.state is JobState.FAILED:
            return f"job {job_id} failed: {(job.error or '')[:300]}"
        return reason


_FINGERPRINT_FIX = "send foundation.hardware.fingerprint's Fingerprint.to_json() of the box, as `farm agent` does"


def agent_fingerprint(fingerprint_id: str, fingerprint_json: str, target_kinds: Sequence[str]) -> "Fingerprint":
    """The fingerprint an agent registers with, whole and parsed, or InvalidRequest naming the field.

    Its details are what every job for it is planned from (its target: mtriple, mcpu, cores):
    one stored incomplete would fail every other caller's submit, so none is taken on trust.
    Its id must be the hash of its details, as the agent's own detection derives it.
    """
    from foundation.hardware.fingerprint import KINDS, fingerprint_from_details
    from foundation.hardware.targets import FINGERPRINT_KIND, unusable_fingerprint

    try:
        described = json.loads(fingerprint_json)
    except (json.JSONDecodeError, RecursionError):
        raise InvalidRequest("fingerprint_json is not JSON", _FINGERPRINT_FIX) from None
    if not isinstance(described, dict):
        raise InvalidRequest(f"fingerprint_json is a JSON {type(described).__name__}, not an object",
                             _FINGERPRINT_FIX)
    kind, details = described.get("kind"), described.get("details")
    if kind not in KINDS:
        raise InvalidRequest(f"fingerprint_json.kind must be one of {', '.join(KINDS)}", _FINGERPRINT_FIX)
    if not isinstance(details, dict):
        raise InvalidRequest("fingerprint_json.details is missing or not an object", _FINGERPRINT_FIX)
    wanted = sorted({FINGERPRINT_KIND[k] for k in target_kinds})
    if kind not in wanted:
        raise InvalidRequest(f"a {kind} fingerprint cannot tune target kinds {sorted(set(target_kinds))}",
                             f"register a {' or '.join(wanted)} fingerprint for them")
    try:
        fingerprint = fingerprint_from_details(kind, details)
    except FarmError as err:
        raise InvalidRequest(f"fingerprint_json.details: {err.problem}", _FINGERPRINT_FIX) from None
    except (TypeError, ValueError, KeyError, AttributeError) as err:  # a field of a type detection never gives
        raise InvalidRequest(f"fingerprint_json.details are malformed ({type(err).__name__})",
                             _FINGERPRINT_FIX) from None
    if fingerprint.id != fingerprint_id:
        raise InvalidRequest(
            f"fingerprint_id is not the hash of fingerprint_json's details (they give {fingerprint.id})",
            "send the id the details give, as foundation.hardware.fingerprint derives it")
    for target_kind in sorted({k for k in target_kinds if FINGERPRINT_KIND[k] == kind}):
        problem = unusable_fingerprint(fingerprint, target_kind)
        if problem:
            raise InvalidRequest(f"fingerprint_json.details give no {target_kind} target: {problem}",
                                 _FINGERPRINT_FIX)
    return fingerprint
