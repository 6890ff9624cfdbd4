"""A loaded model called as engineers call it: inputs by name, DLPack tensors (numpy, torch) in, numpy or DLPack out."""

from __future__ import annotations

import numpy as np
import pytest

import farm
from foundation.errors import BadInput

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(tuned_mlp_tiny, tmp_path_factory):
    """mlp-tiny batch 2, loaded from a copy of the run's tuned registry."""
    home = tuned_mlp_tiny.copy_to(tmp_path_factory.mktemp("call-arguments") / "home")
    return farm.load("mlp-tiny", "llvm", 2, registry=f"sqlite:///{home / 'registry.db'}")


def test_named_inputs_give_what_positional_ones_give(model):
    (x,) = model.example_inputs(3)
    (name,) = [spec["name"] for spec in model.model.inputs]
    np.testing.assert_array_equal(model({name: x})[0], model(x)[0])


def test_an_unknown_or_missing_input_name_is_refused_naming_the_inputs(model):
    (x,) = model.example_inputs(3)
    (name,) = [spec["name"] for spec in model.model.inputs]
    with pytest.raises(BadInput, match="mlp-tiny has no input named 'images'") as unknown:
        model({"images": x})
    assert f"mlp-tiny's inputs are '{name}'" in unknown.value.fix and unknown.value.exit_code == 2
    with pytest.raises(BadInput, match=f"input '{name}' of mlp-tiny is missing"):
        model({})
    with pytest.raises(BadInput, match="output must be 'numpy' or 'dlpack', got 'torch'"):
        model(x, output="torch")


def test_dlpack_tensors_in_and_out(model):
    torch = pytest.importorskip("torch", reason="torch is an optional extra: the DLPack producer of this test")
    (x,) = model.example_inputs(3)
    expected = model(x)[0]
    np.testing.assert_array_equal(model(torch.from_numpy(x))[0], expected)
    np.testing.assert_array_equal(model({model.model.inputs[0]["name"]: torch.from_numpy(x)})[0], expected)
    (out,) = model(x, output="dlpack")
    assert not isinstance(out, np.ndarray) and hasattr(out, "__dlpack__")
    np.testing.assert_array_equal(torch.from_dlpack(out).numpy(), expected)
    np.testing.assert_array_equal(np.from_dlpack(out), expected)
    with pytest.raises(BadInput, match="cannot be read through DLPack: Can't export tensors that require gradient"):
        model(torch.from_numpy(x).requires_grad_())
