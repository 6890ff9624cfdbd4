"""Equal submits make one job: the attach-or-create check was two transactions, and 200 identical
Submits made 3 jobs on SQLite (6 of 20 on PostgreSQL) for one model, target and fingerprint; and a
submit between an agent's registration and the next tick did not see the job waiting for that agent."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from foundation.wire import farm_pb2, farm_pb2_grpc

from support.fake_agent import FakeAgent

CALLERS = 200  # as many as the report sent at once


@pytest.mark.parametrize("bound", [True, False], ids=["fingerprint", "waiting-for-an-agent"])
def test_equal_submits_at_once_make_one_job(start, fingerprint, bound):
    server, channel = start()
    if bound:
        FakeAgent(channel, fingerprint).register()
    client = farm_pb2_grpc.FarmClientStub(channel)
    request = farm_pb2.SubmitRequest(zoo_name="mlp-tiny", batch=1, target="llvm", trials_per_task=4,
                                     weights_layout="plain")
    client.ListJobs(farm_pb2.ListJobsRequest(), timeout=30)  # connected before the callers start

    start_together = threading.Barrier(CALLERS)

    def submit(_):
        start_together.wait(timeout=60)
        (submitted,) = client.Submit(request, timeout=120).jobs
        return submitted.job.id, submitted.attached

    with ThreadPoolExecutor(CALLERS) as pool:
        answers = list(pool.map(submit, range(CALLERS)))
    jobs = client.ListJobs(farm_pb2.ListJobsRequest(), timeout=30).jobs
    assert len(jobs) == 1, [(j.id, j.fingerprint_id) for j in jobs]
    assert {job_id for job_id, _ in answers} == {jobs[0].id}
    assert sorted(attached for _, attached in answers) == [False] + [True] * (CALLERS - 1)
    client.CancelJob(farm_pb2.CancelJobRequest(job_id=jobs[0].id), timeout=30)


def test_a_submit_before_the_tick_binds_a_waiting_job_joins_it(store, fingerprint, tmp_path):
    """The coordinator's parts without its server, so no tick runs: what a submit finds between an agent's
    registration and the tick that binds the job waiting for that agent. It made a second equal job."""
    from coordinator.cluster_store import ClusterStore
    from coordinator.service import Coordinator, CoordinatorSettings
    from foundation.domain.submission import Submission

    coordinator = Coordinator(store, ClusterStore(store), "127.0.0.1:9190",
                              CoordinatorSettings(data_dir=tmp_path / "coordinator"))
    try:
        asked = Submission(model="mlp-tiny", target="llvm", trials_per_task=4, weights_layout="plain")
        (waiting,) = coordinator.client_calls.submit(asked)
        assert waiting.job.fingerprint_id is None and not waiting.attached
        coordinator.agent_calls.register_agent(
            fingerprint_id=fingerprint.id, fingerprint_summary=fingerprint.summary,
            fingerprint_json=json.dumps(fingerprint.to_json()), target_kinds=["llvm"], hostname="agent",
            tvm_version=coordinator.tvm_version, address="127.0.0.1")

        (joined,) = coordinator.client_calls.submit(asked)
        assert joined.attached and joined.job.id == waiting.job.id
        assert joined.job.fingerprint_id == fingerprint.id
        assert [job.id for job in store.list_jobs()] == [waiting.job.id]
    finally:
        coordinator.close()
