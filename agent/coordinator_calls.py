"""The agent's calls to the coordinator: requests from its state machine's instructions, events
from the answers, calls that outlast coordinator restarts, and long polls that yield to a stop.

The translations hold no decisions (agent.state makes them); the real agent (agent.daemon)
and the fake ones (tests, bench/_fake_agent.py) share them, so they speak the same wire.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import grpc

from agent.state.events import (
    CallFailed,
    CancelLeaseOrder,
    HeartbeatAnswered,
    HeartbeatIntervalOrder,
    Lease,
    NothingToLease,
    NothingToValidate,
    Registered,
    ReRegisterOrder,
    ShardLeased,
    ValidationLeased,
)
from agent.state.instructions import LeaseShard, LeaseValidation, SendHeartbeat
from agent.state.policy import TRANSIENT_CODES, Backoff, retry_said
from foundation.wire import farm_pb2
from foundation.wire.handshake import TlsFailure, tls_failure

# What an agent learns about a failed TLS handshake from its coordinator (the agent's
# address and access bound to foundation.wire.handshake.tls_failure); None: gRPC's words alone.
ExplainTls = Callable[[str], TlsFailure | None]

logger = logging.getLogger("farm.agent")


# ---------------------------------------------------------------------- requests and answers


def lease_of(shard) -> Lease:
    """The lease a farm_pb2.Shard (or LeaseRef) is held under."""
    return Lease(shard.job_id, shard.shard_id, shard.attempt)


def registered(reply: farm_pb2.RegisterResponse) -> Registered:
    return Registered(reply.agent_id, reply.heartbeat_interval.ToTimedelta().total_seconds(), reply.tracker)


def heartbeat_request(beat: SendHeartbeat) -> farm_pb2.HeartbeatRequest:
    request = farm_pb2.HeartbeatRequest(
        agent_id=beat.agent_id, rpc_server_serving=beat.rpc_server_serving,
        running_leases=[farm_pb2.LeaseRef(job_id=lease.job_id, shard_id=lease.shard_id, attempt=lease.attempt)
                        for lease in beat.leases])
    request.sent_at.GetCurrentTime()  # the moment the machine listed the leases (just now)
    return request


def heartbeat_answered(reply: farm_pb2.HeartbeatResponse) -> HeartbeatAnswered:
    orders = []
    for instruction in reply.instructions:
        kind = instruction.WhichOneof("instruction")
        if kind == "cancel_lease":
            orders.append(CancelLeaseOrder(lease_of(instruction.cancel_lease.lease), instruction.cancel_lease.reason))
        elif kind == "re_register":
            orders.append(ReRegisterOrder(instruction.re_register.reason))
        elif kind == "set_heartbeat_interval":
            interval = instruction.set_heartbeat_interval.heartbeat_interval
            orders.append(HeartbeatIntervalOrder(interval.ToTimedelta().total_seconds()))
    return HeartbeatAnswered(tuple(orders))


def lease_validation_request(ask: LeaseValidation, fingerprint_id: str,
                             target_kinds) -> farm_pb2.LeaseValidationRequest:
    return farm_pb2.LeaseValidationRequest(agent_id=ask.agent_id, fingerprint_id=fingerprint_id,
                                           target_kinds=list(target_kinds))


def validation_answer(reply: farm_pb2.LeaseValidationResponse) -> ValidationLeased | NothingToValidate:
    return ValidationLeased(reply.validation) if reply.HasField("validation") else NothingToValidate()


def lease_shard_request(ask: LeaseShard, fingerprint_id: str, target_kinds) -> farm_pb2.LeaseShardRequest:
    request = farm_pb2.LeaseShardRequest(agent_id=ask.agent_id, fingerprint_id=fingerprint_id,
                                         target_kinds=list(target_kinds))
    if ask.max_wait > 0:
        request.max_wait.FromNanoseconds(int(ask.max_wait * 1e9))  # held until work comes (a long poll)
    return request


def shard_answer(reply: farm_pb2.LeaseShardResponse) -> ShardLeased | NothingToLease:
    if reply.HasField("shard"):
        return ShardLeased(lease_of(reply.shard), reply.shard)
    return NothingToLease(reply.retry_after.ToTimedelta().total_seconds() if reply.HasField("retry_after") else None)


def call_failed(call, err: grpc.RpcError, explain_tls: ExplainTls | None = None) -> CallFailed:
    return CallFailed(call, err.code().name, failure_details(err, explain_tls))


def failure_details(err: grpc.RpcError, explain_tls: ExplainTls | None = None) -> str:
    """What a failed call's log line says: a failed TLS handshake in words, with what to do
    (it is retried, as the coordinator may be restarting with new certificates, but only a fix
    of the TLS files on one side or the other ends it)."""
    details = err.details() or ""
    tls = (explain_tls or tls_failure)(details)
    return details if tls is None else f"no TLS connection: {tls.problem}; {tls.fix}"


# ---------------------------------------------------------------------- calls


def answer_unless_stopped(call, stop: threading.Event, poll: float = 0.25):
    """The reply of a call in flight (a grpc future), or None if ``stop`` was set first: then
    the call is cancelled, so that a held long poll does not hold up the agent's shutdown.
    A failed call raises its grpc.RpcError, as a blocking call would."""
    answered = threading.Event()
    call.add_done_callback(lambda _call: answered.set())
    while not answered.wait(poll):
        if stop.is_set():
            call.cancel()
            return None
    return call.result()


def retry_unavailable(call: Callable, stop: threading.Event, what: str, patience: float | None = None,
                      backoff: Backoff | None = None, explain_tls: ExplainTls | None = None):
    """Call until it succeeds; UNAVAILABLE/DEADLINE_EXCEEDED are retried with ``backoff`` (0.5 s
    doubling to 5 s), said as policy.retry_said says (a failed handshake as ``explain_tls``
    tells it), and the answer after failed tries is said too."""
    backoff, begin, failed = backoff or Backoff(0.5, 5.0), time.monotonic(), 0
    while not stop.is_set():
        try:
            reply = call()
        except grpc.RpcError as err:
            if err.code().name not in TRANSIENT_CODES:
                raise
            if patience is not None and time.monotonic() - begin > patience:
                raise
            wait = backoff.next()
            failed += 1
            said = retry_said(failed)
            if said is not None:
                logger.warning("%s: coordinator unavailable (%s); retrying in %.1f s%s", what,
                               failure_details(err, explain_tls), wait, said)
            stop.wait(wait)
            continue
        if failed:
            logger.info("%s: the coordinator answered after %d failed tries", what, failed)
        return reply
    return None
