"""ONNX import: the batch goes into dimension 0, weights come from the file, outputs match onnxruntime."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from foundation.errors import FarmError
from foundation.models import load_model, load_onnx_model

# onnx writes IR version 14 by default, which onnxruntime 1.31 refuses.
IR_VERSION = 10
OPSET = 17


def save(graph, path) -> str:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.save(model, str(path))
    return str(path)


def small_cnn(batch_dim="N", height=16):
    """Conv 3->8, ReLU, global average pool, flatten, Gemm 8->10 (transB=1, as PyTorch exports it)."""
    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "conv.weight"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "conv.bias"),
        numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "fc.weight"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fc.bias"),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv.weight", "conv.bias"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], transB=1),
    ]
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch_dim, 3, height, 16])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch_dim, 10])
    return helper.make_graph(nodes, "small_cnn", [image], [logits], initializers)


def test_small_cnn_matches_onnxruntime(tmp_path):
    import onnxruntime
    import tvm
    from tvm import relax

    path = save(small_cnn(), tmp_path / "small_cnn.onnx")
    model = load_onnx_model(path, 3)
    assert model.name == "small_cnn" and model.source == "onnx" and model.batch == 3
    assert model.source_digest == hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert [(s.name, s.shape, s.dtype) for s in model.inputs] == [("image", (3, 3, 16, 16), "float32")]
    assert model.num_parameters == 8 * 3 * 3 * 3 + 8 + 10 * 8 + 10
    assert len(model.mod["main"].params) == 1 + len(model.weights)

    inputs = model.make_inputs(0)
    executable = tvm.compile(model.mod, target="llvm")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    ours = vm["main"](*[tvm.runtime.tensor(a) for a in inputs + model.make_weights()]).numpy()
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {"image": inputs[0]})
    assert ours.shape == (3, 10)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_a_fixed_batch_is_replaced(tmp_path):
    path = save(small_cnn(batch_dim=1), tmp_path / "fixed.onnx")
    model = load_model(path, 8)
    assert model.inputs[0].shape == (8, 3, 16, 16)
    assert model.identity() != load_model(path, 1).identity()


def test_weights_are_the_files_and_ignore_the_seed(tmp_path):
    path = save(small_cnn(), tmp_path / "cnn.onnx")
    model = load_onnx_model(path, 1)
    by_name = dict(zip((w.name for w in model.weights), model.make_weights(seed=5)))
    expected = numpy_helper.to_array(small_cnn().initializer[0])
    np.testing.assert_array_equal(by_name["conv.weight"], expected)


def test_token_ids_stay_below_the_embedding_table(tmp_path):
    table = numpy_helper.from_array(np.ones((50, 4), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["out"])],
        "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 64])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 64, 4])],
        [table],
    )
    model = load_onnx_model(save(graph, tmp_path / "embed.onnx"), 2)
    (ids,) = model.make_inputs()
    assert ids.dtype == np.int64 and ids.shape == (2, 64)
    assert ids.min() >= 0 and ids.max() < 50 and ids.max() > 1


def test_missing_file(tmp_path):
    with pytest.raises(FarmError, match="ONNX file not found") as caught:
        load_onnx_model(tmp_path / "nope.onnx", 1)
    assert caught.value.fix


def test_garbage_bytes(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(FarmError, match="not a valid ONNX model") as caught:
        load_onnx_model(path, 1)
    assert caught.value.fix


def test_text_file_is_not_a_model(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a model\n")
    with pytest.raises(FarmError, match="not a valid ONNX model"):
        load_onnx_model(path, 1)


def test_dynamic_dimension_other_than_batch(tmp_path):
    path = save(small_cnn(height="height"), tmp_path / "dynamic.onnx")
    with pytest.raises(FarmError) as caught:
        load_onnx_model(path, 1)
    assert "'image'" in caught.value.problem and "dimension 2" in caught.value.problem
    assert "'height'" in caught.value.problem
    assert "static shapes" in caught.value.fix


def test_unsupported_op_is_named(tmp_path):
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("FancyNorm", ["r"], ["y"], domain="com.example"),
        ],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.example", 1)]
    )
    model.ir_version = IR_VERSION
    path = tmp_path / "custom.onnx"
    onnx.save(model, str(path))
    with pytest.raises(FarmError) as caught:
        load_onnx_model(path, 1)
    assert "com.example::FancyNorm" in caught.value.problem
    assert "Relu" not in caught.value.problem


def test_batch_must_be_positive(tmp_path):
    path = save(small_cnn(), tmp_path / "cnn.onnx")
    with pytest.raises(FarmError, match="batch"):
        load_onnx_model(path, 0)
