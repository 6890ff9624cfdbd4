"""`DeployedModel.export`: the library with its weights bound in, run by TVM's runtime alone, and its spec."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import farm
from foundation.errors import BadInput

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "serve_exported.py"


@pytest.fixture(scope="module")
def model(tuned_mlp_tiny, tmp_path_factory):
    """mlp-tiny batch 2 (prepacked weights) as `farm.load` gives it, from a copy of the run's tuned registry."""
    home = tuned_mlp_tiny.copy_to(tmp_path_factory.mktemp("export") / "home")
    return farm.load("mlp-tiny", "llvm", 2, registry=f"sqlite:///{home / 'registry.db'}")


@pytest.fixture(scope="module")
def python_without_farm(tmp_path_factory) -> Path:
    """A Python that imports tvm and numpy from the test's environment but not tvm-farm: a serving box's."""
    import site

    env = tmp_path_factory.mktemp("serving") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # Plain paths in a .pth are added as they are: the packages come, the editable install's finder does not.
    Path(purelib, "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def test_the_exported_file_runs_on_tvms_runtime_alone_with_the_inputs_only(model, python_without_farm, tmp_path):
    exported = model.export(tmp_path / "mlp.so")
    x = model.example_inputs(seed=3)
    np.save(tmp_path / "x.npy", x[0])

    no_farm = subprocess.run([str(python_without_farm), "-I", "-c", "import farm"], cwd=tmp_path,
                             capture_output=True, text=True)
    assert no_farm.returncode != 0 and "No module named 'farm'" in no_farm.stderr
    served = subprocess.run([str(python_without_farm), "-I", str(EXAMPLE), str(exported.library),
                             str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npz")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert served.returncode == 0, served.stderr
    (expected,) = model(x)
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["output0"], expected, rtol=1e-5, atol=1e-6)


def test_the_spec_beside_it_describes_the_library(model, tmp_path):
    import tvm

    exported = model.export(str(tmp_path / "mlp.so"))
    spec = json.loads((tmp_path / "mlp.json").read_text())
    assert exported.spec == tmp_path / "mlp.json" and spec == exported.document
    assert spec["sha256"] == hashlib.sha256((tmp_path / "mlp.so").read_bytes()).hexdigest()
    assert [(s["name"], s["shape"], s["dtype"]) for s in spec["inputs"]] == [("data", [2, 64], "float32")]
    assert spec["outputs"] == [{"name": "output0", "shape": [2, 10], "dtype": "float32"}]
    assert spec["target"]["kind"] == "llvm" and spec["device"] == "cpu"
    assert spec["fingerprint"] == model.fingerprint and spec["tuned_on"] == model.artifact.fingerprint_id
    assert spec["tvm_version"] == tvm.__version__ and spec["weights"] == "bound"
    assert spec["weights_layout"] == model.artifact.weights_layout


def test_the_exported_main_takes_no_weights_and_no_load_time_rearranging(model, tmp_path):
    import tvm
    from tvm import relax

    model.export(tmp_path / "mlp.so")
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "mlp.so")), tvm.cpu())
    assert model.library.prepacked  # the stored library rearranges its weights at load; the export has them so
    assert not vm.module.implements_function("main_transform_params")
    with pytest.raises(RuntimeError, match=r"expects 1 arguments \(data\)"):
        vm["main"](*model.library.device_arguments(model.example_inputs()))  # the inputs and the weights


@pytest.mark.parametrize("name", ["mlp.txt", "mlp", ".so", "missing-dir/mlp.so", "a-dir.so"])
def test_a_path_that_cannot_be_written_is_refused_and_nothing_is_written(model, tmp_path, name):
    (tmp_path / "a-dir.so").mkdir()
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(BadInput):
        model.export(tmp_path / name)
    assert sorted(tmp_path.rglob("*")) == before


def test_a_path_of_the_wrong_type_is_refused(model):
    with pytest.raises(BadInput, match="must be a file path"):
        model.export(42)
