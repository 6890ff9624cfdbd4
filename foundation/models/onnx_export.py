"""A zoo model's Relax graph as an ONNX model, op for op with the same weights: what onnxruntime runs.

`farm submit --until onnxruntime` times onnxruntime on this form of a zoo model; the farm checks
its outputs against the untuned TVM build before using it (foundation.job_driver.tuning_rounds).

    model = load_model("bert", 1)
    onnx_model = to_onnx(model.mod, model.make_weights(0))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .relax_graph import Unsupported, expand_tuple_outputs, ints, read_graph, split_sizes

# onnxruntime 1.31 refuses IR version 14 (what recent onnx helpers write by default).
IR_VERSION = 10
OPSET = 17


def to_onnx(mod, weights: Sequence[np.ndarray]):
    """An onnx.ModelProto computing ``mod['main']`` with ``weights`` as initializers."""
    from onnx import TensorProto, helper, numpy_helper

    graph = read_graph(mod)
    if len(weights) != len(graph.weights):
        raise ValueError(f"{len(weights)} weights for a graph of {len(graph.weights)}")
    nodes = []
    initializers = [numpy_helper.from_array(np.asarray(w), name) for (name, _, _), w in zip(graph.weights, weights)]
    initializers += [numpy_helper.from_array(np.asarray(v), name) for name, v in graph.constants.items()]
    tuple_parts: dict[str, list[str]] = {}
    alias: dict[str, str] = {}
    counter = iter(range(1_000_000))

    def const(value: np.ndarray) -> str:
        name = f"attr_const_{next(counter)}"
        initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(kind: str, inputs: list[str], outputs: list[str], **attrs) -> None:
        nodes.append(helper.make_node(kind, inputs, outputs, **attrs))

    def tmp() -> str:
        return f"tmp_{next(counter)}"

    for b in graph.bindings:
        a = b.attrs
        args = [alias.get(x, x) if isinstance(x, str) else x for x in b.args]
        op = b.op
        if op == "alias":
            alias[b.out] = args[0]
        elif op == "tuple":
            tuple_parts[b.out] = list(args)
        elif op == "tuple_get":
            tuple_parts_of = tuple_parts.get(args[0])
            if tuple_parts_of is None:
                raise Unsupported(f"tuple value {args[0]} has no known parts")
            alias[b.out] = tuple_parts_of[args[1]]
        elif op in ("relax.add", "relax.multiply", "relax.subtract", "relax.divide", "relax.matmul"):
            kind = {"relax.add": "Add", "relax.multiply": "Mul", "relax.subtract": "Sub",
                    "relax.divide": "Div", "relax.matmul": "MatMul"}[op]
            node(kind, args[:2], [b.out])
        elif op in ("relax.nn.relu", "relax.tanh", "relax.sigmoid", "relax.exp"):
            node({"relax.nn.relu": "Relu", "relax.tanh": "Tanh", "relax.sigmoid": "Sigmoid",
                  "relax.exp": "Exp"}[op], [args[0]], [b.out])
        elif op == "relax.clip":
            node("Clip", [args[0], const(np.float32(args[1])), const(np.float32(args[2]))], [b.out])
        elif op == "relax.nn.conv2d":
            if a.get("data_layout", "NCHW") != "NCHW" or a.get("kernel_layout", "OIHW") != "OIHW":
                raise Unsupported(f"conv2d layout {a.get('data_layout')}/{a.get('kernel_layout')}")
            top, left, bottom, right = ints(a["padding"])
            node("Conv", args[:2], [b.out], strides=ints(a["strides"]), pads=[top, left, bottom, right],
                 dilations=ints(a["dilation"]), group=int(a["groups"]))
        elif op in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
            top, left, bottom, right = ints(a["padding"])
            extra = {"count_include_pad": int(bool(a.get("count_include_pad")))} if op.endswith("avg_pool2d") else {}
            if op.endswith("max_pool2d"):
                extra["dilations"] = ints(a["dilation"])
            node("MaxPool" if op.endswith("max_pool2d") else "AveragePool", [args[0]], [b.out],
                 kernel_shape=ints(a["pool_size"]), strides=ints(a["strides"]),
                 pads=[top, left, bottom, right], ceil_mode=int(bool(a.get("ceil_mode"))), **extra)
        elif op == "relax.nn.adaptive_avg_pool2d":
            if a.get("output_size") not in ([1], [1, 1]):
                raise Unsupported(f"adaptive_avg_pool2d to {a.get('output_size')}")
            node("GlobalAveragePool", [args[0]], [b.out])
        elif op == "relax.reshape":
            node("Reshape", [args[0], const(np.array(args[1], np.int64))], [b.out])
        elif op == "relax.permute_dims":
            node("Transpose", [args[0]], [b.out], perm=ints(a["axes"]))
        elif op == "relax.nn.softmax":
            node("Softmax", [args[0]], [b.out], axis=int(a["axis"]))
        elif op == "relax.nn.layer_norm":
            if list(a["axes"]) != [-1]:
                raise Unsupported(f"layer_norm over axes {a['axes']}")
            node("LayerNormalization", args[:3], [b.out], axis=-1, epsilon=float(a["epsilon"]))
        elif op == "relax.nn.gelu":  # erf form, as relax.nn.gelu computes it
            scaled, erf, plus, half = tmp(), tmp(), tmp(), tmp()
            node("Mul", [args[0], const(np.float32(1.0 / np.sqrt(2.0)))], [scaled])
            node("Erf", [scaled], [erf])
            node("Add", [erf, const(np.float32(1.0))], [plus])
            node("Mul", [args[0], const(np.float32(0.5))], [half])
            node("Mul", [half, plus], [b.out])
        elif op == "relax.astype":
            to = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32, "int64": TensorProto.INT64}[a["dtype"]]
            node("Cast", [args[0]], [b.out], to=to)
        elif op == "relax.take":
            node("Gather", args[:2], [b.out], axis=int(a["axis"]))
        elif op == "relax.split":
            sizes = split_sizes(graph, args[0], a)
            parts = [f"{b.out}_part{i}" for i in range(len(sizes))]
            node("Split", [args[0], const(np.array(sizes, np.int64))], parts, axis=int(a["axis"]))
            tuple_parts[b.out] = parts
        elif op == "relax.concat":
            node("Concat", list(args[0]) if isinstance(args[0], tuple) else tuple_parts[args[0]], [b.out],
                 axis=int(a["axis"]))
        else:
            raise Unsupported(f"op {op} (no ONNX translation in foundation.models.onnx_export)")

    def value_info(name, shape, dtype):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape))

    outputs = []
    for index, name in enumerate(expand_tuple_outputs(graph)):
        resolved = alias.get(name, name)
        out_name = f"output_{index}"
        node("Identity", [resolved], [out_name])
        outputs.append(helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None))
    onnx_graph = helper.make_graph(nodes, "main", [value_info(*i) for i in graph.inputs], outputs, initializers)
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tvm-farm")
    model.ir_version = IR_VERSION
    return model

