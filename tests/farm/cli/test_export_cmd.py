"""`farm export` and `farm run OUT.so`: a tuned library written out, and run again from the file alone."""

from __future__ import annotations

import json

import pytest

from support.farm_inprocess import run_farm_inprocess

pytestmark = pytest.mark.slow


@pytest.fixture
def home(tuned_mlp_tiny, tmp_path):
    """A copy of the run's home where mlp-tiny batch 2 was tuned."""
    return tuned_mlp_tiny.copy_to(tmp_path / "home")


def test_export_writes_the_library_and_its_spec(home, tmp_path):
    done = run_farm_inprocess("export", "mlp-tiny", "llvm", "2", str(tmp_path / "mlp.so"), "--json", home=home)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["path"] == str(tmp_path / "mlp.so") and document["spec_path"] == str(tmp_path / "mlp.json")
    assert json.loads((tmp_path / "mlp.json").read_text())["sha256"] == document["sha256"]
    assert document["model"] == "mlp-tiny" and document["batch"] == 2 and document["weights"] == "bound"


@pytest.mark.parametrize("args, code, says", [
    (["mlp-tiny", "llvm", "2", "OUT/mlp.txt"], 2, "must end in .so"),
    (["mlp-tiny", "llvm", "2", "OUT/no-such-dir/mlp.so"], 2, "does not exist"),
    (["mlp-tiny", "llvm", "2", "OUT"], 2, "must end in .so"),
    (["mlp-tiny", "llvm", "2", "OUT/mlp.so", "--weights-layout", "packed"], 2, "unknown weights layout"),
    (["mlp-tiny", "llvm", "2", "OUT/mlp.so", "--seed", "-1"], 2, "seed"),
    (["mlp-tiny", "llvm", "7", "OUT/mlp.so"], 3, "no tuned"),
    (["mlp-tiny", "llvm", "2", "OUT/mlp.so", "--fingerprint", "cpu-000000000000"], 3, "no fingerprint"),
])
def test_export_refuses_in_one_line_and_writes_nothing(home, tmp_path, args, code, says):
    out = tmp_path / "out"
    out.mkdir()
    done = run_farm_inprocess("export", *[a.replace("OUT", str(out)) for a in args], home=home)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], done.stderr
    assert list(out.iterdir()) == []


@pytest.fixture
def exported(home, tmp_path):
    """mlp-tiny batch 2 exported to tmp_path/mlp.so."""
    done = run_farm_inprocess("export", "mlp-tiny", "llvm", "2", str(tmp_path / "mlp.so"), "--json", home=home)
    assert done.returncode == 0, done.stderr
    return tmp_path / "mlp.so"


def test_run_times_an_exported_library_and_answers_as_the_stored_one(home, exported, tmp_path):
    import numpy as np

    np.save(tmp_path / "x.npy", np.random.default_rng(5).standard_normal((2, 64)).astype("float32"))
    ran = run_farm_inprocess("run", str(exported), "--input", str(tmp_path / "x.npy"), "--output",
                             str(tmp_path / "y.npy"), "--runs", "3", "--json", home=home)
    assert ran.returncode == 0, ran.stderr
    document = json.loads(ran.stdout)
    assert document["library"] == str(exported) and document["latency_ms"]["runs"] == 3
    assert document["outputs"] == [{"shape": [2, 10], "dtype": "float32"}]
    stored = run_farm_inprocess("run", "mlp-tiny", "llvm", "2", "--input", str(tmp_path / "x.npy"), "--output",
                                str(tmp_path / "y-stored.npy"), "--runs", "1", home=home)
    assert stored.returncode == 0, stored.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.load(tmp_path / "y-stored.npy"), rtol=1e-5, atol=1e-6)


def test_run_refuses_what_an_exported_library_does_not_take(home, exported, tmp_path):
    cases = [
        (["run", str(exported), "llvm"], 2, "TARGET cannot be given"),
        (["run", str(exported), "--fingerprint", "cpu-x"], 2, "--fingerprint cannot be given"),
        (["run", str(tmp_path / "other.so")], 3, "no such file"),
        (["run", str(exported), "--input", str(tmp_path / "none.npy")], 3, "no such input file"),
        (["run", "mlp-tiny"], 2, "missing argument 'TARGET'"),
    ]
    for args, code, says in cases:
        done = run_farm_inprocess(*args, home=home)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == code and len(lines) == 1 and says in lines[0], (args, done.stderr)


def test_run_refuses_an_exported_library_its_spec_does_not_describe(home, exported):
    exported.write_bytes(exported.read_bytes() + b"\0")
    done = run_farm_inprocess("run", str(exported), home=home)
    assert done.returncode == 2 and "sha256 differs" in done.stderr
    exported.with_suffix(".json").unlink()
    done = run_farm_inprocess("run", str(exported), home=home)
    assert done.returncode == 3 and "mlp.json" in done.stderr
