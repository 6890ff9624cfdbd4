"""Models given as Python values: an in-memory onnx.ModelProto, named dimensions sized with shapes,
and their keys (the digest of the model as stored, shapes in it), through farm.submit and farm.load."""

from __future__ import annotations

import hashlib
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import farm
from foundation.errors import BadInput, FarmError
from foundation.models.model_key import model_key


def sequence_model(name: str = "seq_mlp") -> onnx.ModelProto:
    """x[N, sequence, 8] @ W[8, 4] -> relu: one named dimension beyond the batch."""
    weight = numpy_helper.from_array(np.random.default_rng(3).standard_normal((8, 4)).astype("float32"), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "sequence", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "sequence", 4])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_an_in_memory_model_hashes_as_its_file_does_and_is_stored_by_digest(tmp_path):
    model = sequence_model()
    onnx.save(model, tmp_path / "seq_mlp.onnx")
    shapes = {"sequence": 16}
    in_memory, from_file = model_key(model, 1, shapes), model_key(str(tmp_path / "seq_mlp.onnx"), 1, shapes)
    assert in_memory == from_file and in_memory.source == "onnx" and in_memory.name == "seq_mlp"
    assert in_memory.path.name == "seq_mlp.onnx" and in_memory.path.parent.name == in_memory.source_digest
    assert hashlib.sha256(in_memory.path.read_bytes()).hexdigest() == in_memory.source_digest
    stored = onnx.load(in_memory.path)
    assert [d.dim_value or d.dim_param for d in stored.graph.input[0].type.tensor_type.shape.dim] == ["N", 16, 8]
    # Shapes are part of the identity; an input's whole shape may be given instead of its named dimensions.
    assert model_key(model, 1, {"sequence": 32}).source_digest != in_memory.source_digest
    whole = onnx.load(model_key(model, 1, {"x": [1, 16, 8]}).path)
    assert [d.dim_value or d.dim_param for d in whole.graph.input[0].type.tensor_type.shape.dim] == ["N", 16, 8]
    # A model whose dimensions are all fixed keys by its own bytes, as its file does.
    fixed = model_key(onnx.load(in_memory.path), 2)
    assert fixed.source_digest == hashlib.sha256(in_memory.path.read_bytes()).hexdigest() == in_memory.source_digest


@pytest.mark.parametrize(("shapes", "refusal"), [
    ({"seq": 16}, "has no named dimension or input 'seq' (the ONNX model 'seq_mlp''s named dimensions: 'sequence'"),
    ({"N": 4}, "'N' is the ONNX model 'seq_mlp''s batch dimension"),
    ({"sequence": 0}, "shape of 'sequence' must be 1 to 1,048,576, got 0"),
    ({"sequence": "16"}, "shape of 'sequence' must be a size or a list of sizes"),
    ({"sequence": [16, 2]}, "named dimension 'sequence' of the ONNX model 'seq_mlp' takes one size"),
    ({"x": [1, 16]}, "input 'x' of the ONNX model 'seq_mlp' has 3 dimensions, its shape gives 2"),
    ({"x": [2, 16, 8]}, "dimension 0 of input 'x' is the batch (1), its shape gives 2"),
    ({"x": 16}, "shape of input 'x' of the ONNX model 'seq_mlp' must list every dimension"),
    ([("sequence", 16)], "shapes must map named dimensions or inputs to sizes"),
])
def test_bad_shapes_are_refused_in_one_line_before_anything_is_written(tmp_path, shapes, refusal):
    registry = tmp_path / "registry.db"
    for function in (farm.submit, farm.load):
        with pytest.raises(BadInput) as refused:
            function(sequence_model(), "llvm", 1, shapes=shapes, registry=f"sqlite:///{registry}")
        assert refusal in str(refused.value) and refused.value.exit_code == 2 and "\n" not in str(refused.value)
    assert not registry.exists()


def test_shapes_of_a_zoo_model_and_an_unsized_dimension_are_refused(tmp_path):
    with pytest.raises(BadInput, match="shapes apply to ONNX models; 'mlp-tiny' is a zoo model"):
        farm.load("mlp-tiny", "llvm", 1, shapes={"sequence": 16})
    with pytest.raises(BadInput, match="example_inputs apply to a torch.nn.Module only"):
        farm.load(sequence_model(), "llvm", 1, example_inputs=(np.zeros((1, 8)),))
    with pytest.raises(FarmError, match=r"dynamic dimension 1 \('sequence'\).*--shape NAME=SIZE"):
        farm.submit(sequence_model(), "llvm", 1, trials=1, registry=f"sqlite:///{tmp_path / 'r.db'}")


def test_the_cli_refuses_a_malformed_shape_with_exit_2(farm_exe, tmp_path):
    onnx.save(sequence_model(), tmp_path / "seq_mlp.onnx")
    for command in ("submit", "run"):
        for given in ("sequence", "sequence=x", "sequence=0", "=16"):
            done = subprocess.run([farm_exe, command, str(tmp_path / "seq_mlp.onnx"), "llvm", "1", "--shape", given,
                                   "--registry", f"sqlite:///{tmp_path / 'r.db'}"],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 2, (command, given, done.stderr)
            assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
        assert not (tmp_path / "r.db").exists()


@pytest.mark.slow
def test_an_in_memory_model_with_a_named_dimension_is_tuned_loaded_and_run(tmp_path, farm_exe):
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    model = sequence_model()
    job = farm.submit(model, "llvm", 1, shapes={"sequence": 16}, trials=4, trials_per_task=2, runs=2,
                      registry=registry, build_workers=1)
    assert job.succeeded and job.model == "seq_mlp", job
    again = farm.submit(model, "llvm", 1, shapes={"sequence": 16}, trials=4, registry=registry)
    assert again.cache_hit and again.artifact.id == job.artifact.id
    loaded = farm.load(model, "llvm", 1, shapes={"sequence": 16}, registry=registry)
    assert loaded.artifact.id == job.artifact.id
    x = np.random.default_rng(0).standard_normal((1, 16, 8)).astype("float32")
    weight = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(loaded(x)[0], np.maximum(x @ weight, 0), rtol=1e-5, atol=1e-5)
    # Another sequence length is another model: nothing stored for it.
    with pytest.raises(FarmError, match="no tuned library"):
        farm.load(model, "llvm", 1, shapes={"sequence": 32}, registry=registry)
    # The CLI's --shape finds the same library for the same model in a file.
    onnx.save(model, tmp_path / "seq_mlp.onnx")
    ran = subprocess.run([farm_exe, "run", str(tmp_path / "seq_mlp.onnx"), "llvm", "1", "--shape", "sequence=16",
                          "--runs", "2", "--registry", registry, "--json"], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert job.artifact.id in ran.stdout
