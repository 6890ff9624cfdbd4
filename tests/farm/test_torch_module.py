"""A torch.nn.Module with example inputs, tuned and loaded: torch.export into Relax (the torch extra)."""

from __future__ import annotations

import numpy as np
import pytest

import farm
from foundation.errors import BadInput

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install 'tvm-farm[torch]')")


class TinyMlp(torch.nn.Module):
    def __init__(self, hidden: int = 16):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, hidden), torch.nn.Linear(hidden, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_the_key_is_the_graph_and_example_shapes_not_the_weights():
    from foundation.models.torch_import import torch_model_key

    torch.manual_seed(0)
    x = torch.randn(1, 8)
    first, _ = torch_model_key(TinyMlp(), (x,), 1)
    assert first.source == "torch" and first.name == "TinyMlp" and first.path.suffix == ".pt2"
    assert torch_model_key(TinyMlp(), (torch.randn(1, 8),), 1)[0].source_digest == first.source_digest
    assert torch_model_key(TinyMlp(hidden=32), (x,), 1)[0].source_digest != first.source_digest
    assert torch_model_key(TinyMlp(), (torch.randn(2, 8),), 2)[0].source_digest != first.source_digest


@pytest.mark.parametrize(("example_inputs", "refusal"), [
    (None, "a torch module needs example_inputs"),
    ((np.zeros((1, 8), "float32"),), "example input 0 must be a torch.Tensor, got ndarray"),
    ((torch.zeros(2, 8),), "example input 0 has shape [2, 8]: its dimension 0 is not the batch (1)"),
])
def test_bad_example_inputs_are_refused_in_one_line(tmp_path, example_inputs, refusal):
    registry = tmp_path / "registry.db"
    with pytest.raises(BadInput) as refused:
        farm.submit(TinyMlp(), "llvm", 1, example_inputs=example_inputs, registry=f"sqlite:///{registry}")
    assert refusal in str(refused.value) and refused.value.exit_code == 2 and "\n" not in str(refused.value)
    with pytest.raises(BadInput, match="shapes apply to ONNX models"):
        farm.load(TinyMlp(), "llvm", 1, example_inputs=(torch.zeros(1, 8),), shapes={"x": [1, 8]})
    assert not registry.exists()


@pytest.mark.slow
def test_a_torch_module_is_tuned_loaded_and_matches_torch(tmp_path):
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    torch.manual_seed(0)
    module, x = TinyMlp(), torch.randn(1, 8)
    job = farm.submit(module, "llvm", example_inputs=(x,), trials=4, trials_per_task=2, runs=2, registry=registry,
                      build_workers=1)
    assert job.succeeded and job.model == "TinyMlp", job
    # Other weights, the same graph: the same library, run with this module's own weights.
    other = TinyMlp()
    loaded = farm.load(other, "llvm", example_inputs=(x,), registry=registry)
    assert loaded.artifact.id == job.artifact.id
    with torch.no_grad():
        expected = other(x).numpy()
    np.testing.assert_allclose(loaded(x.numpy())[0], expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(BadInput, match="a torch module is tuned embedded only"):
        farm.submit(module, "llvm", example_inputs=(x,), coordinator="127.0.0.1:1")
