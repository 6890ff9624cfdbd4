"""What a gRPC caller may send: every request to the coordinator checked at the edge, before its call runs.

A field out of bounds (an id too long to quote, a batch of 2^32-1, a missing job id) is refused
with INVALID_ARGUMENT naming the field (coordinator.servicer), so that it never reaches the
registry, another caller's call, or an error message longer than gRPC's metadata allows. The
numbers' bounds are the CLI's (foundation.domain.request_limits); what a value means (a known
model, a target, a fingerprint) is the calls' to judge.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from foundation.domain import request_limits as limits
from foundation.domain.request_limits import MAX_ID_LENGTH, MAX_TEXT_LENGTH, Bound
from foundation.errors import BadInput
from foundation.wire import farm_pb2
from foundation.wire.submission import field_name


@dataclass(frozen=True)
class Text:
    limit: int
    required: bool = False


@dataclass(frozen=True)
class Number:
    bound: Bound


@dataclass(frozen=True)
class Finite:
    """A double (or each of a repeated double): no NaN or infinity, which the registry's JSON cannot
    hold on PostgreSQL. In a report it would fail the group commit, every other agent's report with it.
    With ``at_least``, a figure that cannot be smaller (a latency, its spread)."""

    at_least: float | None = None


@dataclass(frozen=True)
class OutputErrors:
    """A validation's OutputCheck: its tolerances finite, its errors never NaN, and infinite only in
    a check that failed (foundation.runtime.validation says so of an output that is not finite):
    a check that passed is shown with its errors, and kept with the artifact. None is negative."""


@dataclass(frozen=True)
class Moment:
    """A google.protobuf.Timestamp: one Python's datetime can hold."""


@dataclass(frozen=True)
class Span:
    """A google.protobuf.Duration: from 0 to ``most`` seconds."""

    most: float


@dataclass(frozen=True)
class Known:
    """A proto enum's value the coordinator knows, never its UNSPECIFIED 0: one it does not
    know would be dropped, and the call answer as if nothing had been asked for."""

    enum: Any  # a generated enum (protobuf's EnumTypeWrapper)


@dataclass(frozen=True)
class Items:
    """A repeated field: at most ``limit`` entries."""

    limit: int


def _or_default(bound: Bound) -> Number:
    """A number the wire may leave 0, meaning the default."""
    return Number(Bound(bound.low, bound.high, zero_is_default=True))


_ID = Text(MAX_ID_LENGTH)
_REQUIRED_ID = Text(MAX_ID_LENGTH, required=True)
_KIND = Text(32)
_SHA256 = Text(128)
_REASON = Text(MAX_TEXT_LENGTH)
_AGENT = {"agent_id": _REQUIRED_ID}
_LEASE = {**_AGENT, "shard_id": _REQUIRED_ID}
_TARGET_KINDS = {"target_kinds": Items(8), "target_kinds[]": _KIND}
# A tuning task's name (TVM's, of its fused operators); agents' error samples are cut at 500.
_TASK_NAME = Text(MAX_TEXT_LENGTH)
# Per task of a shard: a job's tasks are some hundreds at most, each with a few error samples.
_TASKS = Items(10_000)
_TASK_FIGURES = {"tasks": _TASKS, "tasks[].task_name": _TASK_NAME, "tasks[].best_us": Finite(),
                 "tasks[].elapsed_s": Finite(), "tasks[].sample_errors": Items(64), "tasks[].sample_errors[]": _REASON}
# A validated library's latency is kept with its artifact and ranks it among the hits
# (look_up_fastest_hit): no negative time, and runs within what a lease may ask for.
_LATENCY = {
    **{f"{stats}.{figure}": Finite(at_least=0.0) for stats in ("latency", "untuned_latency")
       for figure in ("mean_ms", "median_ms", "std_ms")},
    **{f"{stats}.runs": Number(limits.VALIDATION_RUNS) for stats in ("latency", "untuned_latency")},
    **{f"{stats}.warmup": Number(limits.WARMUP_RUNS) for stats in ("latency", "untuned_latency")},
}
# The cost model a shard's search started from, as the agent names it: kept with the job and
# shown in every snapshot of it.
_COST_MODEL_USED = {
    "warm_start.cost_model.id": Number(limits.ROW_ID), "warm_start.cost_model.kind": _KIND,
    "warm_start.cost_model.sha256": _SHA256, "warm_start.cost_model.size_bytes": Number(limits.ROW_ID),
    "warm_start.cost_model.samples": Number(limits.ROW_ID), "warm_start.cost_model.fingerprint_id": _ID,
    "warm_start.cost_model.tvm_version": Text(64),
}

# Per request message: its fields (a dotted path into nested messages, `[]` for each entry of a
# repeated field) and what each may hold. A field not named here carries no text a call quotes.
RULES: dict[str, dict[str, Text | Number | Finite | OutputErrors | Moment | Span | Known | Items]] = {
    # A submit's numbers are the CLI's and the API's (request_limits.SUBMIT_NUMBERS, by their wire
    # names), refused here before the request is read; what it asks is then checked whole as theirs
    # is (foundation.wire.submission.submission_of: asked_submission).
    "SubmitRequest": {
        "zoo_name": _ID, "target": Text(MAX_TEXT_LENGTH, required=True), "fingerprint_id": _ID,
        "batch": Number(limits.BATCH), "seed": Number(limits.SEED), "reuse": _KIND, "weights_layout": _KIND,
        **{field_name(name): _or_default(bound) for name, bound in limits.SUBMIT_NUMBERS.items()
           if name not in ("seed", "build_workers")},  # seed's 0 is a seed; build_workers is embedded only
        "onnx.file_name": Text(1024), "onnx.sha256": _SHA256, "until.goal": Text(64),
    },
    "GetJobRequest": {"job_id": _REQUIRED_ID},
    "WatchJobRequest": {"job_id": _REQUIRED_ID, "after_sequence": Number(limits.ROW_ID)},
    "CancelJobRequest": {"job_id": _REQUIRED_ID, "reason": _REASON},
    "ListJobsRequest": {"limit": _or_default(limits.LIST_LIMIT),
                        "states": Items(16), "states[]": Known(farm_pb2.JobState), "model_name": _ID},
    "ListAgentsRequest": {"target_kind": _KIND},
    "ExportPackRequest": {"fingerprint_id": _ID, "model_name": _ID, "target": Text(MAX_TEXT_LENGTH)},
    "RegisterRequest": {
        "fingerprint_id": _REQUIRED_ID, "fingerprint_summary": Text(1024),
        "fingerprint_json": Text(limits.MAX_FINGERPRINT_JSON, required=True), "hostname": _ID,
        "tvm_version": Text(64, required=True), "previous_agent_id": _ID,
        "build_workers": _or_default(limits.BUILD_WORKERS),
        **_TARGET_KINDS,
    },
    "HeartbeatRequest": {**_AGENT, "running_leases": Items(1024), "running_leases[].job_id": _ID,
                         "running_leases[].shard_id": _ID, "sent_at": Moment()},
    "LeaseShardRequest": {**_AGENT, "fingerprint_id": _REQUIRED_ID, **_TARGET_KINDS, "max_wait": Span(3600.0)},
    "LeaseValidationRequest": {**_AGENT, "fingerprint_id": _REQUIRED_ID, **_TARGET_KINDS},
    # A record's own times are read where its group is committed: one not finite drops that record
    # (coordinator.fleet.report_ingest), not the report. At most the trials a shard may measure (an
    # agent sends what failed to go before with what follows); progress is kept per task name, in
    # memory until the shard ends (coordinator.fleet.progress_events) and then in the job's events.
    "ReportRecordsRequest": {**_LEASE, "records": Items(limits.TRIALS.high), "records[].workload_shash": _ID,
                             "progress": _TASKS, "progress[].task_name": _TASK_NAME,
                             "progress[].best_us": Finite(), "progress[].best_gflops": Finite()},
    "CompleteShardRequest": {**_LEASE, **_TASK_FIGURES, "warm_start.cost_model_note": _REASON, **_COST_MODEL_USED},
    "FailShardRequest": {**_LEASE, "reason": _REASON, **_TASK_FIGURES},
    "ReportValidationRequest": {**_AGENT, "validation_id": _REQUIRED_ID, "error": _REASON, **_LATENCY,
                                "check": OutputErrors(), "check.reason": _REASON},
    "GetCostModelRequest": {**_AGENT, "id": Number(limits.ROW_ID), "sha256": _SHA256},
}


def check_request(request) -> None:
    """Raise BadInput naming the first field of ``request`` its rules refuse."""
    for path, rule in RULES.get(type(request).__name__, {}).items():
        for value in _values(request, path.split(".")):
            if isinstance(rule, Text):
                limits.check_text(path, value, rule.limit, required=rule.required)
            elif isinstance(rule, Number):
                limits.check_number(path, int(value), rule.bound)
            elif isinstance(rule, Finite):
                _check_finite(path, value, rule.at_least)
            elif isinstance(rule, OutputErrors):
                _check_output_errors(path, value)
            elif isinstance(rule, Moment):
                _check_moment(path, value)
            elif isinstance(rule, Span):
                _check_span(path, value, rule.most)
            elif isinstance(rule, Known):
                _check_known(path, value, rule.enum)
            elif len(value) > rule.limit:
                raise BadInput(f"{path} has {len(value):,} entries, more than the {rule.limit:,} allowed",
                               f"send at most {rule.limit:,}")


def _check_finite(path: str, value, at_least: float | None = None) -> None:
    numbers = [value] if isinstance(value, float) else list(value)
    if not all(math.isfinite(n) for n in numbers):
        raise BadInput(f"{path} holds a number that is not finite (NaN or infinity)", "send finite numbers")
    if at_least is not None and any(n < at_least for n in numbers):
        raise BadInput(f"{path} is below {at_least:g} ({min(numbers):.6g})",
                       f"send what was measured, {at_least:g} or more")


def _check_output_errors(path: str, check) -> None:
    for name in ("rtol", "atol"):
        _check_finite(f"{path}.{name}", getattr(check, name), at_least=0.0)
    for name in ("max_abs_err", "max_rel_err"):
        value = getattr(check, name)
        if value < 0:
            raise BadInput(f"{path}.{name} is negative ({value:.6g})", "send the largest error measured, 0 or more")
        if math.isnan(value):
            raise BadInput(f"{path}.{name} is NaN", "send the largest error measured (infinity where an output "
                                                    "was not finite)")
        if math.isinf(value) and check.passed:
            raise BadInput(f"{path}.{name} is infinite in a check that passed",
                           "send passed=false for outputs that are not finite")


def _check_moment(path: str, stamp) -> None:
    try:
        stamp.ToDatetime()
    except (ValueError, OverflowError):
        raise BadInput(f"{path} is not a time (seconds {limits.shown_number(stamp.seconds)})",
                       "send the time the request was made") from None


def _check_span(path: str, duration, most: float) -> None:
    seconds = duration.seconds + duration.nanos / 1e9
    if not 0 <= seconds <= most:
        raise BadInput(f"{path} must be from 0 to {most:g} seconds, got {seconds:.6g}", f"send a {path} in that range")


def _check_known(path: str, value: int, enum) -> None:
    if value and value in enum.values():
        return
    what = f"0 ({enum.Name(0)})" if not value else f"{limits.shown_number(value)}, not a {enum.DESCRIPTOR.name}"
    known = [name for name, number in enum.items() if number]
    raise BadInput(f"{path} holds {what}", f"send one of {', '.join(known)}")


def _values(message, parts: list[str]) -> Iterator:
    """The values at a dotted path: none where a nested message is unset, one per entry under `[]`."""
    name, rest = parts[0], parts[1:]
    repeated = name.endswith("[]")
    name = name.removesuffix("[]")
    if rest and not repeated and not message.HasField(name):
        return
    value = getattr(message, name)
    for item in (value if repeated else [value]):
        if rest:
            yield from _values(item, rest)
        else:
            yield item
