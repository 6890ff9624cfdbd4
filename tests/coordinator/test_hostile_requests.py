"""What a hostile or careless caller sends over raw gRPC to a real coordinator on loopback: every
field out of bounds is refused with INVALID_ARGUMENT naming it, a registration must carry its
whole fingerprint, and nothing one caller sends (or that was stored before) fails another's call."""

from __future__ import annotations

import json
import math

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.cluster_store import ClusterStore
from coordinator.server import serve
from foundation.registry import RegistryStore
from foundation.wire import farm_pb2, farm_pb2_grpc

from support.fake_agent import FakeAgent
from support.polling import wait_for
from support.served_coordinator import served_coordinator

HUGE = "x" * 100_000
UINT32_MAX = 2**32 - 1


@pytest.fixture(scope="module")
def fingerprint():
    from foundation.hardware.fingerprint import local_fingerprint

    return local_fingerprint("llvm")


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory):
    """One coordinator on SQLite for the module: the refusals below leave nothing behind."""
    with served_coordinator(tmp_path_factory.mktemp("hostile")) as served:
        yield served


def refused(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=30)
    return raised.value


def registration(fingerprint, **fields) -> farm_pb2.RegisterRequest:
    from foundation.hardware.versions import tvm_version

    request = dict(fingerprint_id=fingerprint.id, fingerprint_summary=fingerprint.summary,
                   fingerprint_json=json.dumps(fingerprint.to_json()), target_kinds=["llvm"], hostname="rogue",
                   tvm_version=tvm_version())
    return farm_pb2.RegisterRequest(**(request | fields))


def _details(fingerprint, change) -> str:
    document = fingerprint.to_json()
    change(document["details"])
    return json.dumps(document)


def _matching_id(fingerprint, change: dict) -> dict:
    """Register fields for ``fingerprint``'s details changed by ``change``, under the id they hash
    to where they have one (details refused before their id is compared have none)."""
    from foundation.errors import FarmError
    from foundation.hardware.fingerprint import fingerprint_from_details

    details = {**fingerprint.details, **change}
    try:
        fingerprint_id = fingerprint_from_details("cpu", details).id
    except FarmError:
        fingerprint_id = fingerprint.id
    return {"fingerprint_id": fingerprint_id, "fingerprint_json": json.dumps({"kind": "cpu", "details": details})}


def _without(key):
    return lambda details: details.pop(key)


@pytest.mark.parametrize(("fields", "named"), [
    ({"fingerprint_json": ""}, "fingerprint_json is required"),
    ({"fingerprint_json": "[1,2]"}, "fingerprint_json is a JSON list, not an object"),
    ({"fingerprint_json": "{nope"}, "fingerprint_json is not JSON"),
    ({"fingerprint_json": '{"kind": "cpu"}'}, "fingerprint_json.details is missing"),
    ({"fingerprint_json": '{"kind": "tpu", "details": {}}'}, "fingerprint_json.kind must be one of"),
    ("no llvm_triple", "lack llvm_triple"),
    ("cores are words", "fingerprint field cores='many' is malformed"),
    ({"fingerprint_id": "cpu-000000000000"}, "fingerprint_id is not the hash of fingerprint_json's details"),
    # Details whose id matches but whose target no device has: a triple naming no architecture
    # crashed the coordinator's planning of the next submit, and again on every restart.
    ({"llvm_triple": "garbage"}, "give no llvm target: the triple 'garbage' is not one LLVM names"),
    ({"llvm_mcpu": "znver5 -mattr=+foo"}, "give no llvm target: the CPU 'znver5 -mattr=+foo' is not a name LLVM gives"),
    ({"cores": -4}, "fingerprint field cores=-4 is malformed (expected 1 to 4,096)"),
    ({"cores": 10**30}, "fingerprint field cores=1000000000000000000000000000000 is malformed"),
    ({"cores": math.inf}, "fingerprint field cores=inf is malformed"),
    ({"l2_kib": 1e400}, "fingerprint field l2_kib=inf is malformed"),
    ({"zzz": math.nan}, "fingerprint field zzz=nan is malformed"),
    ({"model": "EPYC\x00"}, "fingerprint field model='EPYC\\x00' is malformed (it holds a NUL character)"),
    ({"fingerprint_id": HUGE}, "fingerprint_id is 100,000 characters long"),
    ({"hostname": HUGE}, "hostname is 100,000 characters long"),
    ({"hostname": "rogue\x00"}, "hostname holds a NUL character"),
    ({"target_kinds": ["cuda"]}, "a cpu fingerprint cannot tune target kinds ['cuda']"),
    ({"build_workers": UINT32_MAX}, "build_workers must be 0 (the default) or 1 to 1,024"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_registration_must_carry_a_whole_fingerprint(coordinator, fingerprint, fields, named):
    server, channel = coordinator
    if fields == "no llvm_triple":
        fields = {"fingerprint_json": _details(fingerprint, _without("llvm_triple"))}
    elif fields == "cores are words":
        fields = {"fingerprint_json": _details(fingerprint, lambda d: d.update(cores="many"))}
    elif set(fields) <= set(fingerprint.details) | {"zzz"}:  # a change to the details, under the id they hash to
        fields = _matching_id(fingerprint, fields)
    err = refused(farm_pb2_grpc.FarmAgentStub(channel).Register, registration(fingerprint, **fields))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert named in err.details() and len(err.details()) < 2000
    listed = farm_pb2_grpc.FarmClientStub(channel).ListAgents(farm_pb2.ListAgentsRequest(include_lost=True))
    assert not [a for a in listed.agents if a.hostname == "rogue"], "a refused registration left an agent"


def test_no_stored_agent_fails_another_callers_submit(coordinator, fingerprint):
    """An agent row whose fingerprint gives no target (stored before registrations were checked
    whole, or of a kind it also lists) is left out of submits: the job goes to the good one."""
    server, channel = coordinator
    store = RegistryStore(server.coordinator.store.url)
    try:
        store.upsert_fingerprint("cpu-0badfeed0bad", "cpu", "half a fingerprint", {"arch": "x86_64"})
        # Whole, but with a triple LLVM takes for no architecture: planning for it crashed the coordinator.
        store.upsert_fingerprint("cpu-0badfeed0bae", "cpu", "no architecture",
                                 {**fingerprint.details, "llvm_triple": "garbage"})
        for bad in ("cpu-0badfeed0bad", "cpu-0badfeed0bae"):
            ClusterStore(store).agents.register_agent(
                fingerprint_id=bad, target_kinds=["llvm"], hostname="old", address="10.0.0.9:1",
                tvm_version="0.27.0", rpc_key=f"farm-{bad}", details={}, now=_now())
    finally:
        store.dispose()
    good = FakeAgent(channel, fingerprint)
    good.register()
    client = farm_pb2_grpc.FarmClientStub(channel)
    reply = client.Submit(farm_pb2.SubmitRequest(zoo_name="mlp-tiny", batch=1, target="llvm", trials_per_task=4,
                                                 weights_layout="plain", reuse="off"), timeout=120)
    assert [j.job.fingerprint_id for j in reply.jobs] == [fingerprint.id]
    # Named, the broken fingerprint is the caller's own choice: refused in one line, not INTERNAL.
    err = refused(client.Submit, farm_pb2.SubmitRequest(zoo_name="mlp-tiny", batch=1, target="llvm",
                                                        fingerprint_id="cpu-0badfeed0bad"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "llvm_triple" in err.details(), err
    # Planned before it is cancelled: the coordinator's TVM work is not left in flight at teardown.
    job_id = reply.jobs[0].job.id
    wait_for(lambda: client.GetJob(farm_pb2.GetJobRequest(job_id=job_id), timeout=30).trials_budget > 0, 60,
             "the job planned", interval=0.1)
    client.CancelJob(farm_pb2.CancelJobRequest(job_id=job_id), timeout=30)


def test_a_target_no_agent_can_measure_is_refused_at_submit(coordinator, fingerprint):
    """`farm submit` refuses such targets on its own box; through a coordinator they were queued
    and tuned: an mcpu LLVM does not know (code for a generic CPU, filed under a key of its own)
    or code for another architecture, measured on agents that cannot run it."""
    import platform

    server, channel = coordinator
    FakeAgent(channel, fingerprint).register()
    client = farm_pb2_grpc.FarmClientStub(channel)
    other_arch = "x86_64-linux-gnu" if platform.machine().lower() in ("aarch64", "arm64") else "aarch64-linux-gnu"
    for target, named in (('{"kind": "llvm", "mcpu": "nosuchcpu"}', "LLVM does not know the CPU 'nosuchcpu'"),
                          (f'{{"kind": "llvm", "mtriple": "{other_arch}"}}', "cannot run on this")):
        for fields in ({}, {"fingerprint_id": fingerprint.id}):
            err = refused(client.Submit, _submit(target=target, **fields))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
            assert f"fingerprint {fingerprint.id} cannot tune it" in err.details() and named in err.details(), err
    jobs = client.ListJobs(farm_pb2.ListJobsRequest(), timeout=30).jobs
    assert not [j for j in jobs if "nosuchcpu" in j.target or other_arch in j.target], jobs


def test_a_waiting_job_for_a_target_no_agent_can_measure_fails_when_one_comes(tmp_path, fingerprint):
    """Submitted before any agent, a job waits for one: bound then to its fingerprint, the same
    check fails it, saying why, instead of tuning it."""
    server = serve(listen="127.0.0.1:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}",
                   tracker="127.0.0.1:9190", heartbeat_interval=0.5, tick_interval=0.1, data_dir=tmp_path / "c")
    channel = grpc.insecure_channel(server.address)
    try:
        client = farm_pb2_grpc.FarmClientStub(channel)
        (waiting,) = client.Submit(_submit(target='{"kind": "llvm", "mcpu": "nosuchcpu"}'), timeout=60).jobs
        assert waiting.job.state == farm_pb2.JOB_STATE_QUEUED and not waiting.job.fingerprint_id
        FakeAgent(channel, fingerprint).register()
        job = wait_for(lambda: (j := client.GetJob(farm_pb2.GetJobRequest(job_id=waiting.job.id), timeout=30))
                       .state == farm_pb2.JOB_STATE_FAILED and j, 30, "the job to fail", interval=0.1)
        assert "LLVM does not know the CPU 'nosuchcpu'" in job.error, job
    finally:
        channel.close()
        server.stop(grace=1)


def test_a_broken_upload_is_named_as_the_caller_sent_it(coordinator):
    import hashlib

    server, channel = coordinator
    content = b"\x08\x01 not a model at all" * 8
    err = refused(farm_pb2_grpc.FarmClientStub(channel).Submit, farm_pb2.SubmitRequest(
        onnx=farm_pb2.OnnxModel(file_name="mine.onnx", content=content, sha256=hashlib.sha256(content).hexdigest()),
        batch=1, target="llvm"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert err.details().startswith("the uploaded mine.onnx is not a valid ONNX model"), err.details()
    assert "/models/" not in err.details()  # where the coordinator keeps uploads is its own business


def test_an_upload_whose_weights_are_in_files_beside_it_says_so_without_the_coordinators_paths(coordinator, tmp_path):
    """Only the .onnx file travels: its external data was looked for in the coordinator's data
    directory, and the refusal quoted that path."""
    import hashlib

    import onnx

    from support.onnx_models import write_small_cnn

    server, channel = coordinator
    model = onnx.load(write_small_cnn(tmp_path / "cnn.onnx"))
    onnx.save(model, tmp_path / "outside.onnx", save_as_external_data=True, location="outside.weights",
              size_threshold=0)
    content = (tmp_path / "outside.onnx").read_bytes()
    err = refused(farm_pb2_grpc.FarmClientStub(channel).Submit, farm_pb2.SubmitRequest(
        onnx=farm_pb2.OnnxModel(file_name="outside.onnx", content=content, sha256=hashlib.sha256(content).hexdigest()),
        batch=1, target="llvm"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert "the uploaded outside.onnx keeps its weights in outside.weights" in err.details(), err.details()
    assert "save_as_external_data=False" in err.details()
    assert str(server.coordinator.settings.data_dir) not in err.details() and "/models/" not in err.details()


def _now():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def _submit(**fields) -> farm_pb2.SubmitRequest:
    return farm_pb2.SubmitRequest(**({"zoo_name": "mlp-tiny", "batch": 1, "target": "llvm"} | fields))


# (service, method, request, the field the refusal names)
OUT_OF_BOUNDS = [
    ("client", "Submit", _submit(batch=UINT32_MAX), "batch must be 1 to 4,096, got 4294967295"),
    ("client", "Submit", _submit(batch=0), "batch must be 1 to 4,096, got 0"),
    ("client", "Submit", _submit(trials=UINT32_MAX), "trials must be 0 (the default) or 1 to 1,000,000"),
    ("client", "Submit", _submit(trials_per_task=UINT32_MAX), "trials_per_task must be"),
    ("client", "Submit", _submit(validation_runs=UINT32_MAX), "validation_runs must be"),
    ("client", "Submit", _submit(seed=2**40), "seed must be 0 to 4,294,967,295"),
    ("client", "Submit", _submit(fingerprint_id=HUGE), "fingerprint_id is 100,000 characters long"),
    ("client", "Submit", _submit(zoo_name=HUGE), "zoo_name is 100,000 characters long"),
    ("client", "Submit", _submit(target=""), "target is required"),
    ("client", "Submit", _submit(target=HUGE), "target is 100,000 characters long"),
    # Attributes TVM rejects: the job was queued, and failed with a traceback in the log as it was planned.
    ("client", "Submit", _submit(target='{"kind":"llvm","foo":"bar"}'), "target attribute 'foo' is not one TVM's"),
    ("client", "Submit", _submit(target='{"kind":"llvm","keys":[1,2]}'), "keys must be a list of strings"),
    # JSON's decoder raised RecursionError: INTERNAL, with a traceback in the log per call.
    ("client", "Submit", _submit(target="[" * 2000 + "]" * 2000), "nested too deeply"),
    ("client", "Submit", _submit(until=farm_pb2.Until(goal="20ms", patience=UINT32_MAX)), "until.patience must be"),
    ("client", "Submit", _submit(until=farm_pb2.Until(goal=HUGE)), "until.goal is 100,000 characters long"),
    ("client", "GetJob", farm_pb2.GetJobRequest(job_id=HUGE), "job_id is 100,000 characters long"),
    ("client", "GetJob", farm_pb2.GetJobRequest(), "job_id is required"),
    ("client", "CancelJob", farm_pb2.CancelJobRequest(job_id="job-x", reason=HUGE), "reason is 100,000 characters"),
    ("client", "ListJobs", farm_pb2.ListJobsRequest(limit=UINT32_MAX), "limit must be 0 (the default) or 1 to 10,000"),
    # An unknown state was dropped, and every job listed as if none had been asked for.
    ("client", "ListJobs", farm_pb2.ListJobsRequest(states=[farm_pb2.JOB_STATE_FAILED, 99]),
     "states[] holds 99, not a JobState"),
    ("client", "ListJobs", farm_pb2.ListJobsRequest(states=[farm_pb2.JOB_STATE_UNSPECIFIED]),
     "states[] holds 0 (JOB_STATE_UNSPECIFIED)"),
    ("agent", "Heartbeat", farm_pb2.HeartbeatRequest(agent_id=HUGE), "agent_id is 100,000 characters long"),
    ("agent", "Heartbeat", farm_pb2.HeartbeatRequest(
        agent_id="a", running_leases=[farm_pb2.LeaseRef(job_id=HUGE, shard_id="s")]), "running_leases[].job_id is"),
    ("agent", "LeaseShard", farm_pb2.LeaseShardRequest(agent_id="a"), "fingerprint_id is required"),
    ("agent", "LeaseShard", farm_pb2.LeaseShardRequest(
        agent_id="a", fingerprint_id="cpu-x", max_wait=Duration(seconds=10**15)), "max_wait must be from 0 to 3600"),
    ("agent", "Heartbeat", farm_pb2.HeartbeatRequest(
        agent_id="a", sent_at=Timestamp(seconds=-99999999999)), "sent_at is not a time"),
    ("agent", "FailShard", farm_pb2.FailShardRequest(agent_id="a", shard_id="s", reason=HUGE), "reason is 100,000"),
    ("agent", "ReportRecords", farm_pb2.ReportRecordsRequest(agent_id="a", shard_id=HUGE), "shard_id is 100,000"),
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(agent_id="a"), "validation_id is required"),
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", latency=farm_pb2.LatencyStats(mean_ms=math.nan)), "latency.mean_ms holds"),
    ("agent", "ReportRecords", farm_pb2.ReportRecordsRequest(
        agent_id="a", shard_id="s", progress=[farm_pb2.TaskProgress(best_us=math.inf)]), "progress[].best_us holds"),
    ("agent", "CompleteShard", farm_pb2.CompleteShardRequest(
        agent_id="a", shard_id="s", tasks=[farm_pb2.TaskSummary(elapsed_s=-math.inf)]), "tasks[].elapsed_s holds"),
    # Text an agent sends that the job's events and log keep, and what the coordinator keeps per task name.
    ("agent", "ReportRecords", farm_pb2.ReportRecordsRequest(
        agent_id="a", shard_id="s", progress=[farm_pb2.TaskProgress(task_name=HUGE)]),
     "progress[].task_name is 100,000"),
    ("agent", "ReportRecords", farm_pb2.ReportRecordsRequest(
        agent_id="a", shard_id="s", progress=[farm_pb2.TaskProgress(task_name=f"t{i}") for i in range(10_001)]),
     "progress has 10,001 entries, more than the 10,000 allowed"),
    ("agent", "ReportRecords", farm_pb2.ReportRecordsRequest(
        agent_id="a", shard_id="s", records=[farm_pb2.MeasuredRecord(workload_shash=HUGE)]),
     "records[].workload_shash is 100,000"),
    ("agent", "CompleteShard", farm_pb2.CompleteShardRequest(
        agent_id="a", shard_id="s", tasks=[farm_pb2.TaskSummary(task_name=HUGE)]), "tasks[].task_name is 100,000"),
    ("agent", "FailShard", farm_pb2.FailShardRequest(
        agent_id="a", shard_id="s", tasks=[farm_pb2.TaskSummary(sample_errors=["x", HUGE])]),
     "tasks[].sample_errors[] is 100,000"),
    ("agent", "CompleteShard", farm_pb2.CompleteShardRequest(
        agent_id="a", shard_id="s", warm_start=farm_pb2.WarmStartUse(cost_model_note=HUGE)),
     "warm_start.cost_model_note is 100,000"),
    # A failed check may say its error is infinite (an output that is not finite); nothing says NaN.
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", check=farm_pb2.OutputCheck(max_abs_err=math.nan)), "check.max_abs_err is NaN"),
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", check=farm_pb2.OutputCheck(passed=True, max_rel_err=math.inf)),
     "check.max_rel_err is infinite in a check that passed"),
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", check=farm_pb2.OutputCheck(rtol=math.inf)), "check.rtol holds"),
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", check=farm_pb2.OutputCheck(reason=HUGE)), "check.reason is 100,000"),
    # A validated library's figures rank it among the hits: a negative latency or error, or runs
    # no lease asks for, were kept with the artifact.
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", latency=farm_pb2.LatencyStats(mean_ms=-5, runs=20)),
     "latency.mean_ms is below 0 (-5)"),
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", untuned_latency=farm_pb2.LatencyStats(std_ms=-1, runs=20)),
     "untuned_latency.std_ms is below 0"),
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", latency=farm_pb2.LatencyStats(mean_ms=1, runs=UINT32_MAX)),
     "latency.runs must be 1 to 1,000,000"),
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", latency=farm_pb2.LatencyStats(mean_ms=1, runs=20, warmup=UINT32_MAX)),
     "latency.warmup must be 0 to 1,000"),
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", check=farm_pb2.OutputCheck(passed=True, max_abs_err=-1)),
     "check.max_abs_err is negative"),
    ("agent", "ReportValidation", farm_pb2.ReportValidationRequest(
        agent_id="a", validation_id="v", check=farm_pb2.OutputCheck(atol=-1)), "check.atol is below 0"),
    # The cost model a shard started from is kept with the job and shown in its every snapshot.
    ("agent", "CompleteShard", farm_pb2.CompleteShardRequest(
        agent_id="a", shard_id="s", warm_start=farm_pb2.WarmStartUse(cost_model=farm_pb2.CostModelRef(sha256=HUGE))),
     "warm_start.cost_model.sha256 is 100,000"),
    ("agent", "CompleteShard", farm_pb2.CompleteShardRequest(
        agent_id="a", shard_id="s", warm_start=farm_pb2.WarmStartUse(cost_model=farm_pb2.CostModelRef(kind="x\x00"))),
     "warm_start.cost_model.kind holds a NUL"),
    ("agent", "CompleteShard", farm_pb2.CompleteShardRequest(
        agent_id="a", shard_id="s", warm_start=farm_pb2.WarmStartUse(cost_model=farm_pb2.CostModelRef(id=2**64 - 1))),
     "warm_start.cost_model.id must be 0 to 9,223,372,036,854,775,807"),
    # PostgreSQL's text holds no NUL: each call failed UNAVAILABLE, as if its registry were down.
    ("client", "GetJob", farm_pb2.GetJobRequest(job_id="job-\x00"), "job_id holds a NUL character"),
    ("client", "CancelJob", farm_pb2.CancelJobRequest(job_id="job-x", reason="why\x00"), "reason holds a NUL"),
    ("agent", "Heartbeat", farm_pb2.HeartbeatRequest(agent_id="agent-\x00"), "agent_id holds a NUL character"),
    ("agent", "FailShard", farm_pb2.FailShardRequest(agent_id="a", shard_id="s", reason="\x00"), "reason holds a NUL"),
    # Numbers that reach the registry as row ids: beyond 63 bits they failed its query (INTERNAL on
    # SQLite, "the registry failed" on PostgreSQL).
    ("agent", "GetCostModel", farm_pb2.GetCostModelRequest(agent_id="a", id=2**64 - 1, sha256="ab"),
     "id must be 0 to 9,223,372,036,854,775,807, got 18446744073709551615"),
]


@pytest.mark.parametrize(("service", "method", "request_message", "named"), OUT_OF_BOUNDS,
                         ids=[f"{m}-{n[:40]}" for _, m, _, n in OUT_OF_BOUNDS])
def test_every_field_out_of_bounds_is_refused_by_name(coordinator, service, method, request_message, named):
    server, channel = coordinator
    stub = (farm_pb2_grpc.FarmClientStub if service == "client" else farm_pb2_grpc.FarmAgentStub)(channel)
    err = refused(getattr(stub, method), request_message)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert named in err.details(), err.details()
    assert HUGE[:1000] not in err.details() and len(err.details()) < 2000
    jobs = farm_pb2_grpc.FarmClientStub(channel).ListJobs(farm_pb2.ListJobsRequest(), timeout=30).jobs
    assert not [j for j in jobs if j.state == farm_pb2.JOB_STATE_QUEUED], "a refused submit queued a job"


@pytest.mark.parametrize(("request_message", "named"), [
    (farm_pb2.WatchJobRequest(job_id=HUGE), "job_id is 100,000 characters long"),
    (farm_pb2.WatchJobRequest(job_id="job-x", after_sequence=2**64 - 1), "after_sequence must be 0 to"),
], ids=["job_id", "after_sequence"])
def test_a_watch_out_of_bounds_is_refused_by_name(coordinator, request_message, named):
    server, channel = coordinator
    with pytest.raises(grpc.RpcError) as raised:
        list(farm_pb2_grpc.FarmClientStub(channel).WatchJob(request_message, timeout=30))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in raised.value.details()


def test_a_reported_record_of_any_shape_is_dropped_not_the_group():
    """Reports are committed in groups: one record of a hostile shape must not fail the others'."""
    from coordinator.fleet.report_ingest import UnreadReport, read_report

    good = json.dumps([[[], []], [0.5], {"kind": "llvm"}, None])
    # run_secs a number, instructions a number or an object, an instruction with nothing in it, a time of
    # null, times the registry's JSON cannot hold
    hostile = [json.dumps(r) for r in ([[["x"]], 5, {}, None], [[5], None, {}, None], [[{"a": 1}], None, {}, None],
                                       [[[[]]], None, {}, None], [[[], []], [None], {}, None],
                                       [[[], []], [1e-3, math.nan], {}, None], [[[], []], [math.inf], {}, None])]
    report = UnreadReport("job-1.s0", 1, "agent-1", "job-1", "cpu-aaaa", '{"kind":"llvm"}', "0.27.0", {},
                          records=[(7, r, "warm") for r in [good, *hostile]], trials=6)
    batch = read_report(report)
    assert [r.run_secs for r in batch.records] == [[0.5]]
    assert batch.events[-1][1]["message"].startswith(f"{len(hostile)} reported record(s) were not kept")


@pytest.mark.parametrize(("method", "payload"), [
    ("/tvmfarm.v1.FarmClient/GetJob", b"\x0a\x02\xed\xb0"),  # job_id: two bytes that are not UTF-8
    ("/tvmfarm.v1.FarmClient/Submit", b"\xff" * 5),  # no wire format at all
    ("/tvmfarm.v1.FarmAgent/Heartbeat", b"\x0a\x02\xed\xb0"),  # a coroutine handler
    ("/tvmfarm.v1.FarmAgent/Register", b"\x0a\x02\xed\xb0"),
], ids=["sync", "corrupt", "coroutine", "register"])
def test_bytes_that_are_no_request_are_refused_by_name_not_unknown(coordinator, caplog, method, payload):
    server, channel = coordinator
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    err = refused(call, payload)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert err.details().startswith("the request cannot be decoded (Error parsing message"), err.details()
    assert not [r for r in caplog.records if r.levelname == "ERROR"], "the refusal logged an error"
    assert farm_pb2_grpc.FarmClientStub(channel).ListJobs(farm_pb2.ListJobsRequest(), timeout=30) is not None


def test_a_watch_of_bytes_that_are_no_request_is_refused_by_name(coordinator):
    server, channel = coordinator
    call = channel.unary_stream("/tvmfarm.v1.FarmClient/WatchJob", request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as raised:
        list(call(b"\x0a\x02\xed\xb0", timeout=30))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot be decoded" in raised.value.details()


def test_an_agent_the_coordinator_does_not_know_is_told_so_as_its_proto_says(coordinator, fingerprint):
    """Asking for something: FAILED_PRECONDITION. Reporting on a lease: not accepted, as a stale
    lease is (the proto's FarmAgent comment); nothing of the report is kept."""
    server, channel = coordinator
    agent = farm_pb2_grpc.FarmAgentStub(channel)
    err = refused(agent.LeaseShard, farm_pb2.LeaseShardRequest(agent_id="agent-nope", fingerprint_id=fingerprint.id,
                                                                target_kinds=["llvm"]))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
    lease = {"agent_id": "agent-nope", "shard_id": "job-nope.s0", "attempt": 1}
    replies = [
        agent.ReportRecords(farm_pb2.ReportRecordsRequest(**lease), timeout=30),
        agent.CompleteShard(farm_pb2.CompleteShardRequest(**lease), timeout=30),
        agent.FailShard(farm_pb2.FailShardRequest(**lease, reason="x"), timeout=30),
        agent.ReportValidation(farm_pb2.ReportValidationRequest(agent_id="agent-nope", validation_id="job-nope.v",
                                                                attempt=1, error="x"), timeout=30),
    ]
    assert [reply.accepted for reply in replies] == [False] * 4 and all(reply.reason for reply in replies), replies
