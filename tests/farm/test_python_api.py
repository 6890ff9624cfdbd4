"""The Python API: farm.submit -> farm.status -> farm.jobs as typed values, embedded and through a
coordinator, and farm.load with the weights given by name."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3

import numpy as np
import pytest

import farm
from farm.api import matched_weights
from foundation.domain.jobs import JobState
from foundation.errors import BadInput, FarmError, NotFound
from foundation.hardware.fingerprint import available_cores
from foundation.models.model_key import model_key

from support.polling import wait_for

SPECS = [{"name": "fc1.weight", "shape": [4, 3], "dtype": "float32"},
         {"name": "fc1.bias", "shape": [4], "dtype": "float32"}]
KEY = model_key("mlp-tiny", 1)


def _weights(specs, seed=1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {s["name"]: rng.standard_normal(s["shape"]).astype(s["dtype"]) for s in specs}


def _store_speed_threads(registry: str, artifact_id: str, threads: int) -> None:
    """Rewrite the threads an artifact's validation chose, as another validation could have."""
    with sqlite3.connect(registry.removeprefix("sqlite:///")) as connection:
        (validation,) = connection.execute("SELECT validation FROM artifacts WHERE id = ?", (artifact_id,)).fetchone()
        validation = json.loads(validation)
        validation["speed"]["threads"] = threads
        connection.execute("UPDATE artifacts SET validation = ? WHERE id = ?", (json.dumps(validation), artifact_id))


def test_weights_by_name_come_out_in_the_specs_order():
    given = _weights(SPECS)
    ordered = matched_weights(KEY, SPECS, dict(reversed(list(given.items()))))
    assert [w.shape for w in ordered] == [(4, 3), (4,)]
    assert np.array_equal(ordered[0], given["fc1.weight"]) and np.array_equal(ordered[1], given["fc1.bias"])
    assert [w.shape for w in matched_weights(KEY, SPECS, list(given.values()))] == [(4, 3), (4,)]


def test_a_missing_unknown_or_misshapen_weight_is_refused_by_name():
    given = _weights(SPECS)
    with pytest.raises(BadInput, match="weight 'fc1.bias' of mlp-tiny is missing") as missing:
        matched_weights(KEY, SPECS, {"fc1.weight": given["fc1.weight"]})
    assert "'fc1.weight', 'fc1.bias'" in missing.value.fix
    with pytest.raises(BadInput, match="mlp-tiny has no weight named 'fc9.weight'"):
        matched_weights(KEY, SPECS, {**given, "fc9.weight": given["fc1.bias"]})
    with pytest.raises(BadInput, match=r"weight 'fc1.weight' of mlp-tiny must be float32\[4, 3\], got float32\[3, 4\]"):
        matched_weights(KEY, SPECS, {**given, "fc1.weight": given["fc1.weight"].T.copy()})
    with pytest.raises(BadInput, match=r"must be float32\[4\], got float64\[4\]"):
        matched_weights(KEY, SPECS, {**given, "fc1.bias": given["fc1.bias"].astype("float64")})
    with pytest.raises(BadInput, match="mlp-tiny takes 2 weights, got 1"):
        matched_weights(KEY, SPECS, [given["fc1.weight"]])
    # A string is a sequence too: its characters were counted as weights ("takes 2 weights, got 3").
    for wrong in ("abc", 5):
        with pytest.raises(BadInput, match="weights must map each weight's name to its array, or list them"):
            matched_weights(KEY, SPECS, wrong)


def test_status_and_jobs_of_a_registry_without_jobs(store):
    url = str(store.url)
    assert farm.jobs(registry=url) == []
    with pytest.raises(NotFound, match="no job 'job-none'"):
        farm.status("job-none", registry=url)
    with pytest.raises(BadInput, match="limit must be 1 to 10,000, got 0"):
        farm.jobs(0, registry=url)
    with pytest.raises(BadInput, match="limit must be an integer, got str"):
        farm.jobs("x", registry=url)
    for model, target, named in ((None, "llvm", "model must be a zoo model's name or an ONNX file's path"),
                                 ("mlp-tiny", 5, "target must be llvm, cuda or a TVM target")):
        with pytest.raises(BadInput, match=named):
            farm.load(model, target, 1, registry=url)
    # A target given as a dict is the JSON object the CLI takes.
    with pytest.raises(NotFound, match="no tuned library for mlp-tiny batch 1"):
        farm.load("mlp-tiny", {"kind": "llvm"}, 1, registry=url)
    with pytest.raises(BadInput, match="patience and round_trials only apply with until"):
        farm.submit("mlp-tiny", "llvm", 1, patience=2, registry=url)


@pytest.mark.slow
def test_submit_status_jobs_and_load_by_name_embedded(tmp_path):
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    job = farm.submit("mlp-tiny", "llvm", 1, trials=4, trials_per_task=2, runs=2, registry=registry,
                      build_workers=1)
    assert isinstance(job, farm.Job)
    assert job.state is JobState.SUCCEEDED and job.succeeded and job.done, job
    assert (job.model, job.batch, job.cache_hit) == ("mlp-tiny", 1, False)
    assert job.artifact is not None and job.artifact.validated and job.artifact.latency.mean_ms > 0
    assert job.trials > 0 and job.created_at is not None

    assert farm.status(job.id, registry=registry) == job
    assert [j.id for j in farm.jobs(registry=registry)] == [job.id]
    again = farm.submit("mlp-tiny", "llvm", 1, trials=4, trials_per_task=2, runs=2, registry=registry)
    assert again.cache_hit and again.artifact.id == job.artifact.id
    assert [j.id for j in farm.jobs(registry=registry)] == [again.id, job.id]

    seeded = farm.load("mlp-tiny", "llvm", 1, registry=registry)
    assert seeded.artifact.id == job.artifact.id
    names = [s["name"] for s in seeded.weight_specs]
    mine = _weights(seeded.weight_specs, seed=7)
    by_name = farm.load("mlp-tiny", "llvm", 1, registry=registry, weights=dict(reversed(list(mine.items()))))
    by_position = farm.load("mlp-tiny", "llvm", 1, registry=registry, weights=[mine[n] for n in names])
    inputs = seeded.example_inputs()
    (named_out,) = by_name(inputs)
    assert np.array_equal(named_out, by_position(inputs)[0])
    assert not np.allclose(named_out, seeded(inputs)[0])  # the weights given, not the seeded ones

    # auto runs it on the threads its validation chose and stored: a microsecond library, one.
    assert seeded.artifact.validation["speed"]["threads"] == 1 and seeded.library.threads == 1
    assert farm.load("mlp-tiny", "llvm", 1, registry=registry, threads=2).library.threads == 2
    # Had it found every core worth their wait, load follows that, whatever the latency stored.
    _store_speed_threads(registry, job.artifact.id, 2)
    assert farm.load("mlp-tiny", "llvm", 1, registry=registry).library.threads == available_cores()

    for runs, warmup, named in ((0, 3, "runs must be 1 to 1,000,000, got 0"), (2, -1, "warmup must be 0 to 1,000")):
        with pytest.raises(BadInput, match=named):
            seeded.time(inputs, runs=runs, warmup=warmup)
    with pytest.raises(BadInput, match=f"weight '{names[-1]}' of mlp-tiny is missing"):
        farm.load("mlp-tiny", "llvm", 1, registry=registry, weights={n: mine[n] for n in names[:-1]})
    with pytest.raises(BadInput, match="mlp-tiny has no weight named 'head.weight'"):
        farm.load("mlp-tiny", "llvm", 1, registry=registry, weights={**mine, "head.weight": mine[names[0]]})
    wrong = {**mine, names[0]: np.zeros((1, 1), "float32")}
    with pytest.raises(BadInput, match=rf"weight '{names[0]}' of mlp-tiny must be float32\[.*\], got float32\[1, 1\]"):
        farm.load("mlp-tiny", "llvm", 1, registry=registry, weights=wrong)


@pytest.mark.slow
@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_submit_status_jobs_through_a_coordinator(make_cluster):
    """A coordinator without agents keeps the job queued: submit, status and jobs see it so.
    Once an agent joins, the job runs on it, and the same calls return it succeeded, with its
    artifact; a second submit that waits is answered from the registry."""
    cluster = make_cluster()
    cluster.start_coordinator()
    job = farm.submit("mlp-tiny", "llvm", 1, trials=2, runs=2, coordinator=cluster.address, wait=False)
    assert job.state is JobState.QUEUED and not job.done, job
    assert job.model == "mlp-tiny" and job.artifact is None
    assert farm.status(job.id, coordinator=farm.Coordinator(cluster.address)).id == job.id
    assert [j.id for j in farm.jobs(coordinator=cluster.address)] == [job.id]
    with pytest.raises(NotFound):
        farm.status("job-none", coordinator=cluster.address)

    cluster.start_agent("agent-1")
    wait_for(lambda: farm.status(job.id, coordinator=cluster.address).done, 300, "the job to end on the agent")
    done = farm.status(job.id, coordinator=cluster.address)
    assert done.succeeded and done.error is None, done
    assert isinstance(done.artifact, farm.JobArtifact) and done.artifact.validated
    assert done.artifact.latency.mean_ms > 0 and done.trials == 2 and done.fingerprint is not None
    assert isinstance(done.finished_at, dt.datetime) and done.document["job"] == job.id

    again = farm.submit("mlp-tiny", "llvm", 1, trials=2, runs=2, coordinator=cluster.address, timeout=120)
    assert again.succeeded and again.cache_hit and again.artifact.id == done.artifact.id, again
    assert [j.id for j in farm.jobs(coordinator=cluster.address)] == [again.id, job.id]


REFUSED = [  # (function, its arguments, what the refusal says); none gets as far as writing anything
    (farm.submit, dict(model=None), "model must be a zoo model's name or an ONNX file's path, got None"),
    (farm.submit, dict(model={"name": "mlp-tiny"}), "model must be a zoo model's name"),
    (farm.submit, dict(target=None), "target must be llvm, cuda or a TVM target"),
    (farm.submit, dict(target=5), "target must be llvm, cuda or a TVM target"),
    (farm.submit, dict(target={"kind": object()}), "target is not a JSON object"),
    (farm.submit, dict(batch=1.5), "batch must be a positive integer"),
    (farm.submit, dict(batch=True), "batch must be a positive integer"),
    (farm.submit, dict(trials=0), "trials must be 1 to 1,000,000, got 0"),
    (farm.submit, dict(trials=2.5), "trials must be an integer, got float"),
    (farm.submit, dict(trials=True), "trials must be an integer, got bool"),
    (farm.submit, dict(trials_per_task=0), "trials_per_task must be 1 to 100,000, got 0"),
    (farm.submit, dict(seed=-1), "seed must be 0 to 4,294,967,295, got -1"),
    (farm.submit, dict(seed=2**32), "seed must be 0 to 4,294,967,295"),
    (farm.submit, dict(build_workers=0), "build_workers must be 1 to 1,024, got 0"),
    (farm.submit, dict(build_workers=5000), "build_workers must be 1 to 1,024, got 5000"),
    (farm.submit, dict(runs=0), "runs must be 1 to 1,000,000, got 0"),
    (farm.submit, dict(until="20ms", patience=0), "patience must be 1 to 1,000, got 0"),
    (farm.submit, dict(until="20ms", round_trials=0), "round_trials must be 1 to 1,000,000, got 0"),
    (farm.submit, dict(until=5), "until must be a string, got int 5"),
    (farm.submit, dict(retune="no"), "retune must be True or False, got str 'no'"),
    (farm.submit, dict(warm_start=None), "warm_start must be True or False, got None"),
    (farm.submit, dict(wait=1), "wait must be True or False, got int 1"),
    (farm.submit, dict(reuse=5), "reuse must be a string, got int 5"),
    (farm.submit, dict(weights_layout=["plain"]), "weights_layout must be a string"),
    (farm.submit, dict(fingerprint=7), "fingerprint must be a string"),
    (farm.submit, dict(timeout=-1), "timeout must be a number of seconds, 0 or more, got int -1"),
    (farm.submit, dict(timeout=float("nan")), "timeout must be a number of seconds"),
    (farm.submit, dict(registry=5), "registry must be a string, got int 5"),
    # Through a coordinator the same checks come first: nothing is sent.
    (farm.submit, dict(trials=0, coordinator="127.0.0.1:1"), "trials must be 1 to 1,000,000, got 0"),
    (farm.submit, dict(seed=-1, coordinator="127.0.0.1:1"), "seed must be 0 to 4,294,967,295, got -1"),
    (farm.load, dict(model=None), "model must be a zoo model's name or an ONNX file's path, got None"),
    (farm.load, dict(batch="1"), "batch must be a positive integer"),
    (farm.load, dict(seed=-1), "seed must be 0 to 4,294,967,295, got -1"),
    (farm.load, dict(threads=1.7), "threads must be 'auto' or a whole number, not '1.7'"),
    (farm.load, dict(threads=True), "threads must be 'auto' or a whole number, not 'True'"),
    (farm.load, dict(threads=0), "threads must be from 1 to 1024, not 0"),
    (farm.load, dict(weights_layout=5), "weights_layout must be a string, got int 5"),
    (farm.load, dict(fingerprint=5), "fingerprint must be a string, got int 5"),
    (farm.load, dict(registry=5), "registry must be a string, got int 5"),
    (farm.status, dict(job_id=None), "job_id is required"),
    (farm.status, dict(job_id=5), "job_id must be a string, got int 5"),
    (farm.jobs, dict(limit=True), "limit must be an integer, got bool"),
]


@pytest.mark.parametrize(("function", "given", "refusal"), REFUSED,
                         ids=[f"{f.__name__}-{'-'.join(given)}-{i}" for i, (f, given, _) in enumerate(REFUSED)])
def test_a_bad_argument_is_refused_as_the_cli_refuses_it_before_anything_is_written(tmp_path, function, given,
                                                                                   refusal):
    registry = tmp_path / "registry.db"
    arguments = {"job_id": "job-x"} if function is farm.status else {}
    if function in (farm.submit, farm.load):
        arguments = {"model": "mlp-tiny", "target": "llvm", "batch": 1}
    arguments = {**arguments, "registry": f"sqlite:///{registry}", **given}
    with pytest.raises(FarmError) as refused:
        function(**arguments)
    assert refusal in str(refused.value)
    assert refused.value.exit_code == 2 and "\n" not in str(refused.value)
    assert not registry.exists()
