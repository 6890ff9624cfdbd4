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
