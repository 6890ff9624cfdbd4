"""The gRPC face of the coordinator: proto messages in, calls of its parts (coordinator.calls), proto messages out.

Nothing here decides anything. Errors become status codes with the coordinator's own
message (what is wrong, and what to do), as proto/tvmfarm/v1/farm.proto lays out.

The server is grpc.aio's (coordinator.server). Most handlers are plain functions, which it
runs in its thread pool; the calls every agent makes all the time (Heartbeat, LeaseShard,
LeaseValidation, ReportRecords) and the WatchJob stream are coroutines: a report or a claim
awaits its group's commit without holding a thread, so that a stalled registry or a thousand
agents' reports do not take every thread from heartbeats, and an idle agent's long-polled
LeaseShard is held at no cost but a timer (docs/benchmarks.md, "Coordinator at scale").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
from collections.abc import Callable
from datetime import timezone

import grpc

from coordinator.calls.agents import AgentCalls
from coordinator.calls.client import ClientCalls
from coordinator.calls.packs import PackCalls
from coordinator.calls.reports import ReportCalls
from coordinator.calls.shards import ShardCalls
from coordinator.calls.validations import ValidationCalls
from coordinator.cluster_store import AgentMismatch, UnknownAgent
from coordinator.errors import AgentRefused, DamagedCostModel, InvalidRequest, Unavailable
from coordinator.fleet import COMMIT_TIMEOUT_S, LoopPacer, ReportSizing
from coordinator.messages import (
    JOB_STATES_BACK,
    agent_message,
    cost_model_ref,
    duration,
    event_message,
    job_message,
    seed_message,
    state_enum,
    tensor,
    tensor_spec,
    timestamp,
    warm_start_use,
)
from coordinator.registry_health import registry_failing
from coordinator.request_checks import check_request
from coordinator.values import CancelLease, LeaseRef, ReRegister, ValidationReport
from foundation.clock import utc_now
from foundation.domain.shards import ShardState
from foundation.errors import FarmError, NotFound, RegistryError
from foundation.registry.entities import WARM_CONTEXT, RecordReport
from foundation.registry.sync import SyncFilter
from foundation.wire import farm_pb2, farm_pb2_grpc
from foundation.wire.submission import submission_of

logger = logging.getLogger("farm.coordinator")

# How often WatchJob looks for new events.
WATCH_POLL_SECONDS = 0.2

_SHARD_STATES = {state: getattr(farm_pb2, f"SHARD_STATE_{state.name}") for state in ShardState}


def _status_code(err: Exception) -> grpc.StatusCode:
    # Order matters: UnknownAgent is a NotFound, and every error here is a FarmError.
    if isinstance(err, (UnknownAgent, AgentMismatch, AgentRefused)):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(err, NotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(err, DamagedCostModel):
        return grpc.StatusCode.DATA_LOSS
    if isinstance(err, (RegistryError, Unavailable)):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(err, (InvalidRequest, FarmError)):
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.INTERNAL


# gRPC sends a status's message in the response's metadata, which the other end refuses beyond
# a few KiB (RESOURCE_EXHAUSTED instead of the error): longer messages are cut.
MAX_DETAILS = 2000


def _details(message: str) -> str:
    return message if len(message) <= MAX_DETAILS else message[: MAX_DETAILS - 1] + "…"


def _ending(err: FarmError) -> tuple[grpc.StatusCode, str, tuple]:
    """How a call that raised ``err`` ends: its status code, message and trailing metadata. A
    registry that failed it is said as the gate says it (coordinator.registry_health), before
    the next tick has noticed, so that callers do not take it for a coordinator out of reach."""
    if isinstance(err, RegistryError):
        message, cause = registry_failing(err.problem)
        return grpc.StatusCode.UNAVAILABLE, _details(message), cause
    return _status_code(err), _details(str(err)), ()


def _rpc(method: Callable) -> Callable:
    """Check the request (coordinator.request_checks), run the handler; a raised error ends the
    call with its status code and message."""

    @functools.wraps(method)
    def handler(self, request, context):
        try:
            check_request(request)
            return method(self, request, context)
        except FarmError as err:
            code, details, trailing = _ending(err)
            context.abort(code, details, trailing_metadata=trailing)
        except Exception as err:
            logger.exception("%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, _details(f"{type(err).__name__}: {err}"))

    return handler


def _rpc_async(method: Callable) -> Callable:
    """`_rpc` for a coroutine handler."""

    @functools.wraps(method)
    async def handler(self, request, context):
        try:
            check_request(request)
            return await method(self, request, context)
        except FarmError as err:
            code, details, trailing = _ending(err)
            await context.abort(code, details, trailing_metadata=trailing)
        except Exception as err:
            logger.exception("%s failed", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, _details(f"{type(err).__name__}: {err}"))

    return handler


@contextlib.asynccontextmanager
async def _ending_the_call(context, name: str):
    """`_rpc_async` for a streaming call: a raised error ends the call with its status code and message."""
    try:
        yield
    except FarmError as err:
        code, details, trailing = _ending(err)
        await context.abort(code, details, trailing_metadata=trailing)
    except Exception as err:
        logger.exception("%s failed", name)
        await context.abort(grpc.StatusCode.INTERNAL, _details(f"{type(err).__name__}: {err}"))


async def _in_pool(executor, call, *args):
    """``call(*args)`` in the server's thread pool, awaited on the loop: for what may read the
    registry, which the event loop must never wait on."""
    return await asyncio.get_running_loop().run_in_executor(executor, call, *args)


async def _committed(future):
    """The answer of a request queued for a group commit (coordinator.fleet.group_commit)."""
    return await asyncio.wait_for(asyncio.wrap_future(future), COMMIT_TIMEOUT_S)


class FarmClientServicer(farm_pb2_grpc.FarmClientServicer):
    def __init__(self, calls: ClientCalls, executor, poll_seconds: float = WATCH_POLL_SECONDS,
                 packs: PackCalls | None = None):
        self.calls = calls
        self.packs = packs
        self.poll_seconds = poll_seconds
        self._executor = executor  # for the registry reads of the WatchJob coroutine

    @_rpc
    def Submit(self, request, context):
        submitted = self.calls.submit(submission_of(request))
        return farm_pb2.SubmitResponse(jobs=[
            farm_pb2.SubmittedJob(job=job_message(self.calls.get_job(s.job.id)), attached=s.attached)
            for s in submitted
        ])

    @_rpc
    def GetJob(self, request, context):
        return job_message(self.calls.get_job(request.job_id))

    @_rpc
    def ListJobs(self, request, context):
        states = [JOB_STATES_BACK[s].value for s in request.states]  # each known (request_checks)
        views = self.calls.list_jobs(request.limit, states, request.model_name)
        return farm_pb2.ListJobsResponse(jobs=[job_message(v) for v in views])

    @_rpc
    def CancelJob(self, request, context):
        return job_message(self.calls.cancel_job(request.job_id, request.reason))

    @_rpc
    def ListAgents(self, request, context):
        views = self.calls.list_agents(request.target_kind, request.include_lost)
        return farm_pb2.ListAgentsResponse(agents=[agent_message(v) for v in views])

    async def ExportPack(self, request, context):
        # The pack is made in the thread pool (it reads the registry), then streamed from its file.
        async with _ending_the_call(context, "ExportPack"):
            check_request(request)
            only = SyncFilter(fingerprint=request.fingerprint_id or None, model=request.model_name or None,
                              target=request.target or None, artifacts=not request.without_artifacts)
            exported = await _in_pool(self._executor, self.packs.export, only)
            try:
                while chunk := await _in_pool(self._executor, exported.read):
                    yield farm_pb2.PackChunk(data=chunk)
            finally:
                exported.close()

    async def ImportPack(self, request_iterator, context):
        async with _ending_the_call(context, "ImportPack"):
            received = self.packs.receive()
            try:
                async for chunk in request_iterator:
                    await _in_pool(self._executor, received.write, chunk.data)
                counts = await _in_pool(self._executor, self.packs.import_, received)
            finally:
                received.close()
            return farm_pb2.ImportPackResponse(copied_json=json.dumps(counts.to_json()))

    async def WatchJob(self, request, context):
        # An async generator: an error, before the first event or while it polls (a registry
        # lost mid-watch), ends the stream with its status; a client that goes away cancels it
        # at its next await.
        async with _ending_the_call(context, "WatchJob"):
            async for event in self._watch(request):
                yield event

    async def _watch(self, request):
        check_request(request)
        snapshot = await _in_pool(self._executor, self.calls.get_job, request.job_id)
        after = request.after_sequence or await _in_pool(
            self._executor, self.calls.last_event_sequence, request.job_id)
        yield farm_pb2.JobEvent(job_id=request.job_id, sequence=after, time=timestamp(utc_now()),
                                snapshot=job_message(snapshot))
        while True:
            events = await _in_pool(self._executor, self.calls.events, request.job_id, after)
            for event in events:
                yield event_message(event, state_enum)
                after = event.sequence
            if not events:
                view = await _in_pool(self._executor, self.calls.get_job, request.job_id)
                if view.job.state.is_final:
                    # Drain what landed between the last poll and the final state.
                    if not await _in_pool(self._executor, self.calls.events, request.job_id, after):
                        return
                    continue
                await asyncio.sleep(self.poll_seconds)


# Reports checked against the registry at once in the thread pool, at most (see ReportRecords).
REPORTS_PREPARED_AT_ONCE = 4
# Committed reports answered per pass of the event loop (coordinator.fleet.loop_pacing): a call that
# comes in during a group's answers passes a few hops of its own, each behind this many.
REPORT_ANSWERS_PER_PASS = 2
# A long-polled LeaseShard (max_wait) is held at most this long, and ends this long before
# the caller's deadline, so that the caller hears "no work" rather than DEADLINE_EXCEEDED.
MAX_LEASE_WAIT_S = 30.0
LEASE_WAIT_MARGIN_S = 2.0
# How often a held LeaseShard looks again (in memory): the delay before it sees new work.
LEASE_WAIT_STEP_S = 0.5
# Held polls end up to this share early, at random: idle agents started together (a fleet
# rolled out at once) would otherwise poll in step, each LeaseValidation of a thousand of them
# arriving in the same fraction of a second, every hold.
LEASE_WAIT_SPREAD = 0.25


class FarmAgentServicer(farm_pb2_grpc.FarmAgentServicer):
    def __init__(self, agents: AgentCalls, shards: ShardCalls, reports: ReportCalls, validations: ValidationCalls,
                 report_sizing: ReportSizing, executor, *, idle_retry_after: float, draining: Callable[[], bool]):
        self.agents = agents
        self.shards = shards
        self.reports = reports
        self.validations = validations
        self.report_sizing = report_sizing
        self.idle_retry_after = idle_retry_after  # how long an idle agent waits before asking again
        self.draining = draining  # true while the server drains: no new work is handed out
        # Where the coroutine handlers run what may touch the registry or take a while.
        self._executor = executor
        self._preparing: asyncio.Semaphore | None = None  # made on the server's loop
        self._answering: LoopPacer | None = None  # likewise

    @_rpc
    def Register(self, request, context):
        reg = self.agents.register_agent(
            fingerprint_id=request.fingerprint_id, fingerprint_summary=request.fingerprint_summary,
            fingerprint_json=request.fingerprint_json, target_kinds=list(request.target_kinds),
            hostname=request.hostname, tvm_version=request.tvm_version, address=_peer(context),
            build_workers=request.build_workers, previous_agent_id=request.previous_agent_id,
        )
        return farm_pb2.RegisterResponse(
            agent_id=reg.agent.id, heartbeat_interval=duration(reg.heartbeat_interval),
            lease_ttl=duration(reg.lease_ttl),
            tracker=farm_pb2.TrackerAddress(host=reg.tracker_host, port=reg.tracker_port, key=reg.tracker_key),
        )

    @_rpc_async
    async def Heartbeat(self, request, context):
        running = [LeaseRef(r.job_id, r.shard_id, r.attempt) for r in request.running_leases]
        # Almost every beat lists what the registry already says the agent holds: answered
        # here, on the loop. Handing each to the thread pool cost a queue behind whatever
        # else waited there (docs/benchmarks.md, "Coordinator at scale").
        if self.agents.settled_heartbeat(request.agent_id, running, request.rpc_server_serving):
            return farm_pb2.HeartbeatResponse()
        instructions = []
        sent_at = request.sent_at.ToDatetime(tzinfo=timezone.utc) if request.HasField("sent_at") else None
        verdict = await _in_pool(self._executor, self.agents.heartbeat, request.agent_id, running,
                                 request.rpc_server_serving, sent_at)
        for item in verdict:
            if isinstance(item, CancelLease):
                ref = farm_pb2.LeaseRef(job_id=item.lease.job_id, shard_id=item.lease.shard_id,
                                        attempt=item.lease.attempt)
                instructions.append(farm_pb2.AgentInstruction(
                    cancel_lease=farm_pb2.CancelLease(lease=ref, reason=item.reason)))
            elif isinstance(item, ReRegister):
                instructions.append(farm_pb2.AgentInstruction(re_register=farm_pb2.ReRegister(reason=item.reason)))
        return farm_pb2.HeartbeatResponse(instructions=instructions)

    @_rpc_async
    async def LeaseShard(self, request, context):
        # Answered from memory when there is surely nothing to lease; otherwise the claim
        # waits for its group's commit without holding a thread. With max_wait, a long poll:
        # the call is held, looking again every LEASE_WAIT_STEP_S (in memory), until a shard
        # is leased to it or a validation appears that it could lease.
        loop = asyncio.get_running_loop()
        held_until = loop.time() + _hold_seconds(request, context)
        kinds = list(request.target_kinds)
        validation_at_start = self.validations.may_offer_validation(request.agent_id, request.fingerprint_id)
        while True:
            claim = self.shards.claim_shard(request.agent_id, request.fingerprint_id, kinds, on_loop=True)
            lease = None if claim is None else await _committed(claim)
            if lease is not None:
                break
            if (not validation_at_start
                    and self.validations.may_offer_validation(request.agent_id, request.fingerprint_id)):
                return farm_pb2.LeaseShardResponse(retry_after=duration(0.0))  # ask LeaseValidation now
            # After a claim that found nothing (another agent was first), a longer step: the
            # pending-work answer it went by is refreshed at most every quarter second.
            step = LEASE_WAIT_STEP_S * (2 if claim is not None else 1)
            if self.draining() or loop.time() + step > held_until:
                return farm_pb2.LeaseShardResponse(retry_after=duration(self.idle_retry_after))
            await asyncio.sleep(step)
        offer = await _in_pool(self._executor, self.shards.shard_offer, lease, request.fingerprint_id)
        shard = offer.lease.shard
        return farm_pb2.LeaseShardResponse(shard=farm_pb2.Shard(
            job_id=shard.job_id, shard_id=shard.id, attempt=shard.attempt,
            tasks=[farm_pb2.TuneTask(name=t.name, weight=t.weight, flop=t.flop, mod_json=t.mod_json,
                                     workload_shash=t.workload_shash, max_trials=t.max_trials,
                                     seeds=[seed_message(s) for s in t.seeds])
                   for t in offer.tasks],
            target=offer.target,
            budget=farm_pb2.TrialBudget(max_trials_global=offer.max_trials_global,
                                        max_trials_per_task=offer.max_trials_per_task,
                                        num_trials_per_iter=offer.num_trials_per_iter),
            tracker=farm_pb2.TrackerAddress(host=offer.tracker_host, port=offer.tracker_port, key=offer.tracker_key),
            seed=offer.seed, records_per_report=offer.report_size.records,
            report_within=duration(offer.report_size.within_s),
            warm_records=[farm_pb2.WarmRecord(workload_shash=s, tuning_record_json=r) for s, r in offer.warm_records],
            max_seeds_per_task=offer.max_seeds_per_task,
            cost_model=cost_model_ref(offer.cost_model) if offer.cost_model else None,
        ))

    @_rpc_async
    async def ReportRecords(self, request, context):
        records = [(r.workload_shash, r.tuning_record_json, r.timing_context or WARM_CONTEXT) for r in request.records]
        progress = [
            {"task_name": p.task_name, "trials": p.trials, "budget": p.budget, "build_errors": p.build_errors,
             "run_errors": p.run_errors, "best_us": p.best_us, "best_gflops": p.best_gflops}
            for p in request.progress
        ]
        # Checked here, on the loop, from what the coordinator keeps in memory; its records are
        # read where the group is committed (coordinator.fleet.report_ingest). Only a report of a
        # job or an agent this process has not seen yet reads the registry, in the pool:
        # a few at a time, so that a burst of them does not fill the pool's one queue ahead
        # of heartbeats (with a thousand agents they waited seconds there).
        prepared = self.reports.prepare_cached_report(request.agent_id, request.shard_id, request.attempt,
                                                          records, progress)
        if prepared is None:
            if self._preparing is None:
                self._preparing = asyncio.Semaphore(REPORTS_PREPARED_AT_ONCE)
            async with self._preparing:
                prepared = await _in_pool(self._executor, self.reports.prepare_report, request.agent_id,
                                          request.shard_id, request.attempt, records, progress)
        if isinstance(prepared, RecordReport):
            result = prepared
        else:
            # The lease holder called: alive now, not only once its records are checked and committed
            # (replaying a report's traces takes a while on a busy coordinator).
            self.reports.seen_alive(prepared)
            if prepared.report.records:  # traces replayed: off the loop
                prepared = await _in_pool(self._executor, self.reports.checked, prepared)
            committed = await _committed(self.reports.enqueue_report(prepared))
            # A group's reports are answered together: a few per pass of the loop, so that
            # calls arriving meanwhile (heartbeats) do not wait behind the whole group.
            if self._answering is None:
                self._answering = LoopPacer(REPORT_ANSWERS_PER_PASS)
            await self._answering.turn()
            result = self.reports.finish_report(prepared, committed)
        reply = farm_pb2.ReportRecordsResponse(accepted=result.accepted, reason=result.reason or "",
                                               stored=result.stored, duplicates=result.duplicates)
        if result.accepted and not isinstance(prepared, RecordReport) and prepared.refused:
            reply.refused = len(prepared.refused)
            reply.refused_reason = prepared.refused[0][:2000]
        if result.accepted:
            size = self.report_sizing.offer()
            reply.records_per_report = size.records
            reply.report_within.CopyFrom(duration(size.within_s))
        return reply

    @_rpc
    def CompleteShard(self, request, context):
        outcome = self.shards.complete_shard(
            request.agent_id, request.shard_id, request.attempt, [_summary(t) for t in request.tasks],
            warm_start_use(request.warm_start) if request.HasField("warm_start") else None)
        return farm_pb2.CompleteShardResponse(accepted=outcome.accepted, reason=outcome.reason)

    @_rpc
    def GetCostModel(self, request, context):
        content = self.shards.cost_model_bytes(request.agent_id, request.id, request.sha256)
        return farm_pb2.CostModelBlob(content=content, sha256=request.sha256)

    @_rpc
    def FailShard(self, request, context):
        outcome = self.shards.fail_shard(request.agent_id, request.shard_id, request.attempt,
                                              request.reason, [_summary(t) for t in request.tasks])
        return farm_pb2.FailShardResponse(
            accepted=outcome.accepted, reason=outcome.reason,
            shard_state=_SHARD_STATES.get(outcome.shard_state, 0) if outcome.shard_state else 0)

    @_rpc_async
    async def LeaseValidation(self, request, context):
        # Every idle agent asks before each LeaseShard: answered from memory when surely
        # nothing waits; a claim reads the registry, in the pool.
        if not self.validations.may_offer_validation(request.agent_id, request.fingerprint_id):
            return self._no_validation()
        return await _in_pool(self._executor, self._lease_validation, request)

    def _no_validation(self):
        return farm_pb2.LeaseValidationResponse(retry_after=duration(self.idle_retry_after))

    def _lease_validation(self, request):
        offer = self.validations.lease_validation(request.agent_id, request.fingerprint_id)
        if offer is None:
            return self._no_validation()
        lease, v = offer.lease, offer.lease.validation
        message = farm_pb2.ValidationLease(
            job_id=lease.job.id, validation_id=offer.validation_id, attempt=v.attempt, target=lease.job.target,
            library=lease.library, lib_format=v.lib_format, library_sha256=v.library_sha256,
            inputs=[tensor_spec(s) for s in v.inputs], weight_specs=[tensor_spec(s) for s in v.weights],
            weights=[tensor(tensor_spec(s), value) for s, value in zip(v.weights, offer.weight_values)],
            seed=v.seed, runs=v.runs, warmup=v.warmup,
        )
        if lease.reference_library is not None:
            message.reference_library = lease.reference_library
        return farm_pb2.LeaseValidationResponse(validation=message)

    @_rpc
    def ReportValidation(self, request, context):
        from foundation.runtime.validation import ValidationResult

        report = ValidationReport(error=request.error)
        if not request.error and request.HasField("check") and request.HasField("latency"):
            c = request.check
            report = ValidationReport(
                check=ValidationResult(c.passed, c.max_abs_err, c.max_rel_err, c.rtol, c.atol, c.reason or None),
                latency=_latency(request.latency),
                untuned_latency=_latency(request.untuned_latency) if request.HasField("untuned_latency") else None,
            )
        outcome = self.validations.report_validation(request.agent_id, request.validation_id, request.attempt, report)
        return farm_pb2.ReportValidationResponse(accepted=outcome.accepted, reason=outcome.reason)


def _hold_seconds(request, context) -> float:
    """How long a LeaseShard may be held: what the agent asked for, capped, shortened at random
    by up to LEASE_WAIT_SPREAD, and inside its deadline."""
    if not request.HasField("max_wait"):
        return 0.0
    wanted = min(request.max_wait.ToTimedelta().total_seconds(), MAX_LEASE_WAIT_S)
    wanted *= 1 - random.uniform(0, LEASE_WAIT_SPREAD)
    remaining = context.time_remaining()
    if remaining is not None:
        wanted = min(wanted, remaining - LEASE_WAIT_MARGIN_S)
    return max(0.0, wanted)


def _latency(stats):
    from foundation.runtime.library_runner import Latency

    return Latency(stats.mean_ms, stats.median_ms, stats.std_ms, stats.runs, stats.warmup)


def _summary(task) -> dict:
    return {"task_name": task.task_name, "trials": task.trials, "build_errors": task.build_errors,
            "run_errors": task.run_errors, "best_us": task.best_us, "elapsed_s": task.elapsed_s,
            "sample_errors": list(task.sample_errors)}


def _peer(context) -> str:
    """host:port of the caller as gRPC saw it ("ipv4:1.2.3.4:5678" -> "1.2.3.4:5678")."""
    peer = context.peer() or ""
    return peer.split(":", 1)[1] if peer.startswith(("ipv4:", "ipv6:")) else peer

