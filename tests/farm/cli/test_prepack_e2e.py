"""Prepacked weights end to end through the real `farm`: tune, validate, store, hit, run with plain weights.

The model is an ONNX file, so the prepacked library is run with the file's own (plain)
weights and compared with onnxruntime, not only with the untuned build the job validated
against. The same model tuned plain beside it keeps its own records and artifact.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from support.farm_inprocess import run_farm_inprocess
from support.farm_process import one_error_line, run_farm
from support.onnx_models import write_small_cnn

pytestmark = pytest.mark.slow

TUNE = ["--trials", "8", "--trials-per-task", "4", "--runs", "3"]


def farm(exe: str, home: Path, *args: str) -> dict:
    """A real `farm` process: what tunes or runs a library."""
    return _document(run_farm(exe, home, *args), args)


def farm_here(home: Path, *args: str) -> dict:
    """`farm` in this process (support.farm_inprocess): what only reads the registry, a hit say."""
    return _document(run_farm_inprocess(*args, home=home), args)


def _document(proc, args) -> dict:
    assert proc.returncode == 0, f"farm {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("prepack-home")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_small_cnn(tmp_path_factory.mktemp("prepack-model") / "small_cnn.onnx")


@pytest.fixture(scope="module")
def prepacked(farm_exe, home, model) -> dict:
    return farm(farm_exe, home, "submit", str(model), "llvm", "1", *TUNE, "--weights-layout", "prepacked", "--json")


@pytest.fixture(scope="module")
def plain(farm_exe, home, model, prepacked) -> dict:
    return farm(farm_exe, home, "submit", str(model), "llvm", "1", *TUNE, "--weights-layout", "plain", "--json")


def _rows(home: Path, sql: str, *params) -> list:
    with sqlite3.connect(home / "registry.db") as db:
        return db.execute(sql, params).fetchall()


def test_a_prepacked_job_tunes_validates_and_stores_a_prepacked_library(prepacked, farm_exe, home):
    assert prepacked["state"] == "succeeded" and prepacked["cache_hit"] is False
    assert prepacked["weights_layout"] == "prepacked"
    assert prepacked["artifact"]["weights_layout"] == "prepacked"
    assert prepacked["artifact"]["validation"]["passed"] is True
    status = farm_here(home, "status", prepacked["job"], "--json")
    assert status["weights_layout"] == "prepacked"
    shown = run_farm_inprocess("status", prepacked["job"], home=home).stdout
    assert "Weights:" in shown and "prepacked" in shown
    # The tuned workloads are the layout-free TIR, not the plain model's.
    tuned = _rows(home, "SELECT w.mod_json FROM tuning_records r JOIN workloads w ON w.id = r.workload_id "
                        "WHERE r.job_id = ?", prepacked["job"])
    assert len(tuned) == prepacked["trials"] > 0
    for (mod_json,) in tuned:  # MetaSchedule's Workload JSON: [structural hash, base64 of tvm.ir.save_json]
        assert b"layout_free_buffers" in base64.b64decode(json.loads(mod_json)[1])


def test_the_prepacked_library_runs_with_the_files_plain_weights(prepacked, farm_exe, home, model, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    ran = farm(farm_exe, home, "run", str(model), "llvm", "1", "--input", str(tmp_path / "x.npy"),
               "--output", str(tmp_path / "y.npy"), "--runs", "2", "--json")
    assert ran["artifact"] == prepacked["artifact"]["id"] and ran["stored"]["weights_layout"] == "prepacked"
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)


def test_farm_load_rearranges_plain_weights_once(prepacked, home, model, monkeypatch):
    import farm as farm_api

    monkeypatch.setenv("FARM_HOME", str(home))
    monkeypatch.delenv("FARM_REGISTRY", raising=False)
    deployed = farm_api.load(str(model), "llvm", 1)
    assert deployed.artifact.id == prepacked["artifact"]["id"] and deployed.library.prepacked
    from foundation.models.onnx_import import load_onnx_model

    plain_weights = load_onnx_model(model, 1).make_weights()
    packed = [tuple(w.shape) for w in deployed.library._weights]
    # MetaSchedule rewrote at least one weight's layout: main takes other shapes than the file has.
    assert packed != [w.shape for w in plain_weights]


def test_plain_and_prepacked_forms_coexist_and_each_hits_its_own(plain, prepacked, farm_exe, home, model):
    assert plain["state"] == "succeeded" and plain["cache_hit"] is False, "a prepacked artifact is no plain hit"
    assert plain["weights_layout"] == plain["artifact"]["weights_layout"] == "plain"
    assert plain["artifact"]["id"] != prepacked["artifact"]["id"]
    again_packed = farm_here(home, "submit", str(model), "llvm", "1", "--weights-layout", "prepacked", "--json")
    again_plain = farm_here(home, "submit", str(model), "llvm", "1", "--weights-layout", "plain", "--json")
    assert again_packed["cache_hit"] and again_packed["artifact"]["id"] == prepacked["artifact"]["id"]
    assert again_plain["cache_hit"] and again_plain["artifact"]["id"] == plain["artifact"]["id"]
    assert again_packed["weights_layout"] == "prepacked" and again_plain["weights_layout"] == "plain"
    for form in ("plain", "prepacked"):  # `farm run` loads the newest of either, or the form asked for
        ran = farm(farm_exe, home, "run", str(model), "llvm", "1", "--weights-layout", form, "--runs", "1", "--json")
        assert ran["artifact"] == (plain if form == "plain" else prepacked)["artifact"]["id"]
    # Each form's records are of its own workloads.
    workloads = {job: {w for (w,) in _rows(home, "SELECT DISTINCT workload_id FROM tuning_records WHERE job_id = ?",
                                           job)}
                 for job in (plain["job"], prepacked["job"])}
    assert workloads[plain["job"]] and workloads[prepacked["job"]]
    assert not workloads[plain["job"]] & workloads[prepacked["job"]]


def test_blocked_activations_tune_validate_and_run_with_the_files_plain_weights(farm_exe, home, model, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    blocked = farm(farm_exe, home, "submit", str(model), "llvm", "1", *TUNE, "--weights-layout", "prepacked-nchwc",
                   "--json")
    assert blocked["state"] == "succeeded" and blocked["cache_hit"] is False
    assert blocked["weights_layout"] == blocked["artifact"]["weights_layout"] == "prepacked-nchwc"
    assert blocked["artifact"]["validation"]["passed"] is True  # against the untuned plain build
    # The convolution tuned is the blocked one (RGB in, NCHW8c out), not the plain model's.
    tasks = json.loads((home / "jobs" / blocked["job"] / "tasks.json").read_text())
    convolutions = [t["name"] for t in tasks if "conv2d" in t["name"]]
    assert convolutions and all("conv2d_NCHWc" in name for name in convolutions), [t["name"] for t in tasks]
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    ran = farm(farm_exe, home, "run", str(model), "llvm", "1", "--weights-layout", "prepacked-nchwc",
               "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"), "--runs", "2", "--json")
    assert ran["artifact"] == blocked["artifact"]["id"]
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)


def test_an_unknown_weights_layout_is_bad_input(home, model):
    proc = run_farm_inprocess("submit", str(model), "llvm", "1", "--weights-layout", "packed", home=home)
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == ("error: unknown weights layout 'packed' "
                                           "(use one of auto, plain, prepacked, prepacked-nchwc)")
