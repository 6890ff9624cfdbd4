"""Prometheus scrapes of a live coordinator and agent during a real (tiny) job, on a farm that
demands its token over TLS: the numbers move, the series are the contract's
(tests/support/metrics_contract.py), and the output passes `promtool check metrics`."""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess

import pytest

from foundation.hardware.versions import tvm_version

from support.certificates import CertificateAuthority
from support.metrics_contract import METRICS
from support.polling import wait_for
from support.prometheus_scrape import Scrape

pytestmark = pytest.mark.slow

ON_SQLITE = pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
# Two batches a task: the best-latency gauge needs a best for every task, so with one batch a
# task it would live only between the last batch and the job's build, too short to be scraped.
SUBMIT = ["submit", "mlp-tiny", "llvm", "2", "--trials", "48", "--trials-per-task", "24", "--runs", "3"]


def check_contract(*scrapes: Scrape) -> None:
    """Every metric of the contract is served with its type, and its samples with its labels."""
    families = {name: f for scrape in scrapes for name, f in scrape.families.items()}
    for name, (kind, labels, values) in METRICS.items():
        assert name in families, f"{name} is not served"
        assert families[name].type == kind, (name, families[name].type)
        for sample in families[name].samples:
            own = set(sample.labels) - ({"le"} if sample.name.endswith("_bucket") else set())
            assert own == labels, (sample.name, sample.labels)
            for label, allowed in values.items():
                assert sample.labels[label] in allowed, (sample.name, sample.labels)


@ON_SQLITE
def test_metrics_move_during_a_job(make_cluster, tmp_path):
    authority = CertificateAuthority(tmp_path / "pki")
    issued = authority.issue("coordinator", server=True)
    farm = make_cluster(token="metrics-test-token", tls=(authority.cert, issued.cert, issued.key), metrics=True)
    farm.start_coordinator()
    farm.start_agent("a1")
    [agent] = farm.wait_agents(1)
    coordinator_port, agent_port = farm.metrics_ports["coordinator"], farm.metrics_ports["a1"]
    texts = []

    before = Scrape(agent_port)
    texts.append(before.text)
    assert before.value("farm_agent_info", fingerprint=agent["fingerprint_id"], device="cpu") == 1
    assert before.value("farm_trials_total") == 0 and before.value("farm_rpc_server_restarts_total") == 0
    assert before.labels("farm_build_info") == [{"version": "0.1.0", "tvm_version": tvm_version(),
                                                 "python_version": platform.python_version()}]
    idle = Scrape(coordinator_port)
    texts.append(idle.text)
    assert idle.value("farm_agents", fingerprint=agent["fingerprint_id"], state="idle") == 1
    assert idle.labels("farm_build_info") == before.labels("farm_build_info")
    assert idle.value("grpc_server_handled_total", grpc_method="Register", grpc_code="OK") == 1

    job_id = json.loads(farm.farm(*SUBMIT, "--no-wait", "--json").stdout)["job"]
    seen = {"running": 0.0, "leased": 0.0, "busy": 0.0, "latency": 0.0, "trials": 0.0, "moved": 0.0}

    def finished() -> bool:
        scrape = Scrape(coordinator_port)
        seen["running"] = max(seen["running"], scrape.value("farm_jobs", state="running"))
        seen["leased"] = max(seen["leased"], scrape.value("farm_shards", state="leased"))
        seen["busy"] = max(seen["busy"], scrape.value("farm_agents", state="busy"))
        seen["moved"] = max(seen["moved"], scrape.value("farm_job_last_event_timestamp_seconds", job_id=job_id))
        latency = scrape.value("farm_job_best_latency_seconds", job_id=job_id, model="mlp-tiny")
        if latency:
            seen["latency"] = latency
            texts.append(scrape.text)
            trials = Scrape(agent_port)
            seen["trials"] = max(seen["trials"], trials.value("farm_trials_total"))
            texts.append(trials.text)
        return scrape.value("farm_jobs", state="succeeded") == 1

    wait_for(finished, 600, f"{job_id} succeeded\n{farm.log('coordinator')[-3000:]}", interval=0.5)
    assert seen["running"] == 1 and seen["leased"] == 1 and seen["busy"] == 1, seen
    # The best latency of the running job was there, and a plausible model latency for a tiny MLP.
    assert 0 < seen["latency"] < 1.0, seen
    assert seen["trials"] > 0, "trials were counted while the job ran"

    done = json.loads(farm.farm("status", job_id, "--json").stdout)
    after, measured = Scrape(coordinator_port), Scrape(agent_port)
    texts += [after.text, measured.text]
    assert after.value("farm_jobs", state="running") == 0 and not after.labels("farm_job_best_latency_seconds")
    assert after.value("farm_registry_lookups_total", result="miss") == 1
    assert after.value("farm_artifacts_committed_total") == 1
    assert 0 < after.value("farm_records_ingested_total", fingerprint=agent["fingerprint_id"]) <= done["trials"]
    assert after.value("farm_shards", state="done") >= 1
    assert after.value("farm_lease_expirations_total") == 0 and after.value("farm_shard_retries_total") == 0
    # The job's wait and life, once each; it moved while unfinished and left the gauge when done.
    assert after.value("farm_job_queue_wait_seconds_count", mode="budget") == 1
    assert after.value("farm_job_duration_seconds_count", state="succeeded", mode="budget") == 1
    assert after.value("farm_job_duration_seconds_count") == 1
    assert after.value("farm_job_duration_seconds_sum") > after.value("farm_job_queue_wait_seconds_sum") >= 0
    assert seen["moved"] > 0 and not after.labels("farm_job_last_event_timestamp_seconds")
    # The calls of the job, counted by method and code, and timed.
    for method in ("Submit", "Register", "LeaseShard", "ReportRecords", "CompleteShard", "ReportValidation"):
        assert after.value("grpc_server_handled_total", grpc_method=method, grpc_code="OK") >= 1, method
        assert after.value("grpc_server_handling_seconds_count", grpc_method=method) >= 1, method
    assert after.value("grpc_server_handled_total", grpc_method="Submit") == 1
    # Every candidate the agent tried is counted once, by outcome.
    counted = measured.value("farm_trials_total", fingerprint=agent["fingerprint_id"], target_kind="llvm")
    assert counted == done["trials"] == measured.value("farm_trials_total")
    assert measured.value("farm_trials_total", outcome="ok") > 0
    for histogram in ("farm_build_duration_seconds", "farm_measure_duration_seconds"):
        batches = measured.value(f"{histogram}_count")
        assert batches > 0 and measured.value(f"{histogram}_sum") > 0, histogram
        assert measured.value(f"{histogram}_bucket", le="+Inf") == batches

    hit = json.loads(farm.farm(*SUBMIT, "--json").stdout)
    assert hit["cache_hit"] is True
    assert Scrape(coordinator_port).value("farm_registry_lookups_total", result="hit") == 1
    check_contract(after, measured)

    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian package prometheus): the scrapes were not linted")
    for text in texts:
        linted = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                                timeout=60)
        assert linted.returncode == 0, linted.stdout + linted.stderr


def test_metrics_listen_is_checked(farm_exe, tmp_path):
    """A taken port or a malformed address ends the coordinator with an error line, and no traceback."""
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        for listen, needle in ((f"127.0.0.1:{taken.getsockname()[1]}", "cannot serve metrics"),
                               ("9464", "is not host:port")):
            proc = subprocess.run([farm_exe, "coordinator", "--listen", "127.0.0.1:0", "--tracker-listen",
                                   "127.0.0.1:0", "--metrics-listen", listen], env=env, capture_output=True,
                                  text=True, timeout=120)
            lines = [line for line in proc.stderr.splitlines() if line.strip() and not line[0].isdigit()]
            assert "Traceback" not in proc.stderr
            assert proc.returncode == 2 and lines and lines[-1].startswith("error: ") and needle in lines[-1], \
                proc.stderr
