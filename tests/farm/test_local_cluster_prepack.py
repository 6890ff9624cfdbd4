"""Prepacked weights through the distributed farm: the coordinator plans layout-free tasks,
an agent tunes and validates them, and the artifact runs here with the file's plain weights."""

from __future__ import annotations

import base64
import json
import subprocess

import numpy as np
import pytest

from support.farm_process import one_error_line

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_a_prepacked_job_through_the_coordinator(local_farm, tmp_path):
    from support.onnx_models import write_small_cnn

    path = write_small_cnn(tmp_path / "small_cnn.onnx")
    local_farm.start_coordinator()
    local_farm.start_agent("a1")
    local_farm.wait_agents(1)

    refused = local_farm.farm("submit", str(path), "cuda", "1", "--weights-layout", "prepacked", check=False)
    assert refused.returncode == 2
    assert "weights cannot be prepacked for a cuda target" in one_error_line(refused.stderr)

    done = json.loads(local_farm.farm("submit", str(path), "llvm", "1", "--trials", "8", "--trials-per-task", "4",
                                      "--runs", "3", "--weights-layout", "prepacked", "--json",
                                      "--timeout", "300").stdout)
    assert done["state"] == "succeeded", done
    assert done["weights_layout"] == "prepacked" and done["artifact"]["validation"]["passed"]
    status = json.loads(local_farm.farm("status", done["job"], "--json").stdout)
    assert status["weights_layout"] == "prepacked"

    from foundation.registry.store import RegistryStore

    store = RegistryStore(local_farm.registry_url)
    try:
        assert store.get_artifact(done["artifact"]["id"]).weights_layout == "prepacked"
        records = [r for r in store.records.all_records() if r.job_id == done["job"]]
        assert len(records) == done["trials"] > 0
        # What the agent tuned is the layout-free TIR the coordinator planned.
        for _shash, mod_json in store.records.get_workloads({r.workload_id for r in records}).values():
            assert b"layout_free_buffers" in base64.b64decode(json.loads(mod_json)[1])
    finally:
        store.dispose()

    # A plain submit is not answered by the prepacked artifact.
    plain = json.loads(local_farm.farm("submit", str(path), "llvm", "1", "--weights-layout", "plain", "--no-wait",
                                       "--json").stdout)
    assert plain["cache_hit"] is False and plain["weights_layout"] == "plain"
    local_farm.farm("cancel", plain["job"])

    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    ran = subprocess.run([local_farm.exe, "run", str(path), "llvm", "1", "--registry", local_farm.registry_url,
                          "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"), "--runs", "2",
                          "--json"], env=local_farm.env("runner"), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["stored"]["weights_layout"] == "prepacked"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)

    # Blocked activations too: planned, sharded, tuned by the agent and built here in that form.
    blocked = json.loads(local_farm.farm("submit", str(path), "llvm", "1", "--trials", "8", "--trials-per-task", "4",
                                         "--runs", "3", "--weights-layout", "prepacked-nchwc", "--json",
                                         "--timeout", "300").stdout)
    assert blocked["state"] == "succeeded" and blocked["artifact"]["validation"]["passed"], blocked
    assert blocked["weights_layout"] == "prepacked-nchwc"
    assert any("conv2d_NCHWc" in line["task"] for line in blocked["trial_plan"]["tasks"]), blocked["trial_plan"]
    store = RegistryStore(local_farm.registry_url)
    try:
        assert store.get_artifact(blocked["artifact"]["id"]).weights_layout == "prepacked-nchwc"
    finally:
        store.dispose()
    ran = subprocess.run([local_farm.exe, "run", str(path), "llvm", "1", "--registry", local_farm.registry_url,
                          "--weights-layout", "prepacked-nchwc", "--input", str(tmp_path / "x.npy"), "--output",
                          str(tmp_path / "y.npy"), "--runs", "2", "--json"], env=local_farm.env("runner"),
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["artifact"] == blocked["artifact"]["id"]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)
