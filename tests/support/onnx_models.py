"""Small ONNX models built in the tests (onnx.helper), written with an IR version onnxruntime reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_small_cnn(path: Path, *, batch_dim: str | int = "N") -> Path:
    """Conv(3->8, 3x3) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(8->5), input [N,3,16,16]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype("float32") * 0.3, "conv_w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype("float32") * 0.1, "conv_b")
    fw = numpy_helper.from_array(rng.standard_normal((5, 8)).astype("float32") * 0.3, "fc_w")
    fb = numpy_helper.from_array(rng.standard_normal(5).astype("float32") * 0.1, "fc_b")
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, 5])],
        initializer=[w, b, fw, fb],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10  # onnx's default (14) is newer than onnxruntime 1.31 accepts
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, path)
    return path


def write_small_cnn_other_head(path: Path) -> Path:
    """`write_small_cnn`'s layers up to the pooling, then Gemm(8->7): a model sharing its first tasks."""
    import onnx
    from onnx import numpy_helper

    path = write_small_cnn(Path(path))
    model = onnx.load(path)
    rng = np.random.default_rng(1)
    weights = {"fc_w": rng.standard_normal((7, 8)).astype("float32") * 0.3,
               "fc_b": rng.standard_normal(7).astype("float32") * 0.1}
    for i, init in enumerate(model.graph.initializer):
        if init.name in weights:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(weights[init.name], init.name))
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 7
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
