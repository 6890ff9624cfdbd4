"""A zoo model's Relax graph re-emitted for other engines: as an ONNX model, and as PyTorch eager calls.

The zoo's networks are written in Relax (foundation/models); other engines need the same
network with the same weights. Both emitters walk the high-level ops of ``main`` (before
legalization) one binding at a time, so whatever a zoo model is made of either translates
op for op or is refused by name; nothing is re-implemented per architecture. ``main``'s
parameters are the model's inputs then its weights (``num_input`` says where they split):
in ONNX the weights become initializers, in PyTorch tensors passed to every call.
Callers check the outputs against TVM's before trusting either.

    from foundation.models.loading import load_model
    model = load_model("bert", 1)
    onnx_model = to_onnx(model.mod, model.make_weights(0))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# onnxruntime 1.31 refuses IR version 14 (what recent onnx helpers write by default).
IR_VERSION = 10
OPSET = 17


class Unsupported(ValueError):
    """The graph holds an op (or an attribute value) these emitters do not translate."""


@dataclass(frozen=True)
class Binding:
    """One step of ``main``: ``out = op(*args)``; args are value names or Python constants."""

    out: str
    op: str  # a relax op name ("relax.nn.conv2d"), or "tuple_get" / "tuple" / "constant" / "alias"
    args: tuple
    attrs: dict


@dataclass(frozen=True)
class Graph:
    inputs: list[tuple[str, tuple[int, ...], str]]  # (name, shape, dtype)
    weights: list[tuple[str, tuple[int, ...], str]]
    bindings: list[Binding]
    outputs: list[str]
    constants: dict[str, np.ndarray]


def _scalar(value):
    """A Python number from an IntImm/FloatImm or a plain number."""
    return getattr(value, "value", value)


def _ints(values) -> list[int]:
    return [int(_scalar(v)) for v in values]


def _tensor_type(expr) -> tuple[tuple[int, ...], str]:
    ty = expr.ty
    return tuple(_ints(ty.shape.values)), str(ty.dtype)


# Methods of TVM's attribute objects, not attributes of the op.
_ATTR_METHODS = {"get_int", "get_int_tuple", "get_str", "id_", "is_", "same_as"}


def _attrs_of(call) -> dict:
    attrs = call.attrs
    if attrs is None:
        return {}
    out = {}
    for key in dir(attrs):
        if key.startswith("_") or key in _ATTR_METHODS:
            continue
        value = getattr(attrs, key)
        if value is None or isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif hasattr(value, "value"):  # IntImm, FloatImm
            out[key] = value.value
        else:
            try:
                out[key] = [_scalar(v) for v in value]
            except TypeError:
                out[key] = str(value)
    return out


def read_graph(mod) -> Graph:
    """The bindings of ``mod['main']`` in order, with the attributes the emitters need."""
    from tvm import relax

    main = mod["main"]
    num_input = int(main.attrs["num_input"]) if main.attrs and "num_input" in main.attrs else len(main.params)
    names: dict[object, str] = {}
    params = []
    for param in main.params:
        names[param] = param.name
        params.append((param.name, *_tensor_type(param)))
    constants: dict[str, np.ndarray] = {}
    bindings: list[Binding] = []
    counter = iter(range(1_000_000))

    def name_of(expr) -> str:
        if type(expr).__name__ in ("GenericConst", "Constant"):
            name = f"const_{next(counter)}"
            constants[name] = expr.value.numpy()
            return name
        if expr not in names:
            raise Unsupported(f"expression {type(expr).__name__} ({expr}) used before it is bound")
        return names[expr]

    for block in main.body.blocks:
        for b in block.bindings:
            out = f"{b.var.name}_{next(counter)}"
            value = b.value
            if isinstance(value, relax.Call):
                args: list = []
                for arg in value.args:
                    if isinstance(arg, relax.ShapeExpr):
                        args.append(tuple(_ints(arg.values)))
                    elif type(arg).__name__ in ("IntImm", "FloatImm", "PrimValue"):
                        args.append(float(_scalar(arg)))
                    else:
                        args.append(name_of(arg))
                bindings.append(Binding(out, str(value.op.name), tuple(args), _attrs_of(value)))
            elif isinstance(value, relax.TupleGetItem):
                bindings.append(Binding(out, "tuple_get", (name_of(value.tuple_value), int(value.index)), {}))
            elif isinstance(value, relax.Tuple):
                bindings.append(Binding(out, "tuple", tuple(name_of(f) for f in value.fields), {}))
            else:
                bindings.append(Binding(out, "alias", (name_of(value),), {}))
            names[b.var] = out
    body = main.body.body
    outputs = [name_of(f) for f in body.fields] if isinstance(body, relax.Tuple) else [name_of(body)]
    return Graph(params[:num_input], params[num_input:], bindings, outputs, constants)


def _expand_tuple_outputs(graph: Graph) -> list[str]:
    """The graph's outputs with tuples flattened (BERT returns (hidden states, pooled))."""
    tuples = {b.out: list(b.args) for b in graph.bindings if b.op == "tuple"}
    aliases = {b.out: b.args[0] for b in graph.bindings if b.op == "alias"}
    flat: list[str] = []

    def add(name: str) -> None:
        name = aliases.get(name, name)
        if name in tuples:
            for field in tuples[name]:
                add(field)
        else:
            flat.append(name)

    for name in graph.outputs:
        add(name)
    return flat


def _sym_pads(padding: Sequence[int], what: str) -> tuple[int, int]:
    top, left, bottom, right = _ints(padding)
    if (top, left) != (bottom, right):
        raise Unsupported(f"asymmetric padding {list(padding)} of {what}")
    return top, left


# ---------------------------------------------------------------- ONNX


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
            top, left, bottom, right = _ints(a["padding"])
            node("Conv", args[:2], [b.out], strides=_ints(a["strides"]), pads=[top, left, bottom, right],
                 dilations=_ints(a["dilation"]), group=int(a["groups"]))
        elif op in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
            top, left, bottom, right = _ints(a["padding"])
            extra = {"count_include_pad": int(bool(a.get("count_include_pad")))} if op.endswith("avg_pool2d") else {}
            if op.endswith("max_pool2d"):
                extra["dilations"] = _ints(a["dilation"])
            node("MaxPool" if op.endswith("max_pool2d") else "AveragePool", [args[0]], [b.out],
                 kernel_shape=_ints(a["pool_size"]), strides=_ints(a["strides"]),
                 pads=[top, left, bottom, right], ceil_mode=int(bool(a.get("ceil_mode"))), **extra)
        elif op == "relax.nn.adaptive_avg_pool2d":
            if a.get("output_size") not in ([1], [1, 1]):
                raise Unsupported(f"adaptive_avg_pool2d to {a.get('output_size')}")
            node("GlobalAveragePool", [args[0]], [b.out])
        elif op == "relax.reshape":
            node("Reshape", [args[0], const(np.array(args[1], np.int64))], [b.out])
        elif op == "relax.permute_dims":
            node("Transpose", [args[0]], [b.out], perm=_ints(a["axes"]))
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
            sizes = _split_sizes(graph, args[0], a)
            parts = [f"{b.out}_part{i}" for i in range(len(sizes))]
            node("Split", [args[0], const(np.array(sizes, np.int64))], parts, axis=int(a["axis"]))
            tuple_parts[b.out] = parts
        elif op == "relax.concat":
            node("Concat", list(args[0]) if isinstance(args[0], tuple) else tuple_parts[args[0]], [b.out],
                 axis=int(a["axis"]))
        else:
            raise Unsupported(f"op {op} (no ONNX translation in bench/relax_graph.py)")

    def value_info(name, shape, dtype):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape))

    outputs = []
    for index, name in enumerate(_expand_tuple_outputs(graph)):
        resolved = alias.get(name, name)
        out_name = f"output_{index}"
        node("Identity", [resolved], [out_name])
        outputs.append(helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None))
    onnx_graph = helper.make_graph(nodes, "main", [value_info(*i) for i in graph.inputs], outputs, initializers)
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tvm-farm bench/relax_graph.py")
    model.ir_version = IR_VERSION
    return model


_shapes_cache: dict[int, dict[str, tuple[int, ...]]] = {}


def _split_sizes(graph: Graph, source: str, attrs: dict) -> list[int]:
    """relax.split's indices (or section count) as the sizes ONNX and PyTorch take."""
    dim = _static_shapes(graph)[source][int(attrs["axis"])]
    spec = attrs["indices_or_sections"]
    if isinstance(spec, (int, float)):
        sections = int(spec)
        return [dim // sections] * sections
    bounds = [0, *_ints(spec), dim]
    return [bounds[i + 1] - bounds[i] for i in range(len(bounds) - 1)]


def _static_shapes(graph: Graph) -> dict[str, tuple[int, ...]]:
    """Every value's shape, by running the graph on zeros with numpy (cheap for what split needs)."""
    cached = _shapes_cache.get(id(graph))
    if cached is not None:
        return cached
    values: dict[str, object] = {n: np.zeros(s, d) for n, s, d in [*graph.inputs, *graph.weights]}
    values.update(graph.constants)
    shapes = run_bindings(graph, values, _NUMPY_OPS, stop_at_split_source=True)
    _shapes_cache[id(graph)] = shapes
    return shapes


# ---------------------------------------------------------------- eager interpreters (numpy for shapes, PyTorch)


def run_bindings(graph: Graph, values: dict, ops: dict[str, Callable], stop_at_split_source: bool = False):
    """Evaluate the bindings with ``ops``; returns the outputs (or every value's shape)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for b in graph.bindings:
        args = [values[x] if isinstance(x, str) and x in values else x for x in b.args]
        if b.op == "alias":
            values[b.out] = args[0]
        elif b.op == "tuple":
            values[b.out] = tuple(args)
        elif b.op == "tuple_get":
            values[b.out] = args[0][b.args[1]]
        else:
            fn = ops.get(b.op)
            if fn is None:
                raise Unsupported(f"op {b.op} (no eager translation in bench/relax_graph.py)")
            values[b.out] = fn(b, args, graph)
        if stop_at_split_source:
            value = values[b.out]
            if hasattr(value, "shape"):
                shapes[b.out] = tuple(value.shape)
    if stop_at_split_source:
        shapes.update({n: tuple(s) for n, s, _ in [*graph.inputs, *graph.weights]})
        return shapes
    return [values[name] for name in _expand_tuple_outputs(graph)]


def _np_split(b, args, graph):
    spec = b.attrs["indices_or_sections"]
    axis = int(b.attrs["axis"])
    if isinstance(spec, (int, float)):
        return tuple(np.split(args[0], int(spec), axis=axis))
    return tuple(np.split(args[0], _ints(spec), axis=axis))


def _np_conv_shape(b, args, graph):
    x, w = args[0], args[1]
    a = b.attrs
    (sh, sw), (dh, dw) = _ints(a["strides"]), _ints(a["dilation"])
    top, left, bottom, right = _ints(a["padding"])
    kh, kw = w.shape[2], w.shape[3]
    h = (x.shape[2] + top + bottom - dh * (kh - 1) - 1) // sh + 1
    wd = (x.shape[3] + left + right - dw * (kw - 1) - 1) // sw + 1
    return np.zeros((x.shape[0], w.shape[0], h, wd), np.float32)


def _np_pool_shape(b, args, graph):
    x = args[0]
    a = b.attrs
    (kh, kw), (sh, sw) = _ints(a["pool_size"]), _ints(a["strides"])
    top, left, bottom, right = _ints(a["padding"])
    rnd = np.ceil if a.get("ceil_mode") else np.floor
    h = int(rnd((x.shape[2] + top + bottom - kh) / sh)) + 1
    w = int(rnd((x.shape[3] + left + right - kw) / sw)) + 1
    return np.zeros((x.shape[0], x.shape[1], h, w), np.float32)


_NUMPY_OPS: dict[str, Callable] = {
    "relax.add": lambda b, a, g: a[0] + a[1],
    "relax.multiply": lambda b, a, g: a[0] * a[1],
    "relax.subtract": lambda b, a, g: a[0] - a[1],
    "relax.divide": lambda b, a, g: a[0] / np.where(a[1] == 0, 1, a[1]),
    "relax.matmul": lambda b, a, g: np.matmul(a[0], a[1]),
    "relax.nn.relu": lambda b, a, g: a[0],
    "relax.tanh": lambda b, a, g: a[0],
    "relax.sigmoid": lambda b, a, g: a[0],
    "relax.exp": lambda b, a, g: a[0],
    "relax.clip": lambda b, a, g: a[0],
    "relax.nn.gelu": lambda b, a, g: a[0],
    "relax.nn.softmax": lambda b, a, g: a[0],
    "relax.nn.layer_norm": lambda b, a, g: a[0],
    "relax.astype": lambda b, a, g: a[0].astype(b.attrs["dtype"]),
    "relax.reshape": lambda b, a, g: a[0].reshape(a[1]),
    "relax.permute_dims": lambda b, a, g: np.transpose(a[0], _ints(b.attrs["axes"])),
    "relax.take": lambda b, a, g: np.take(a[0], np.zeros(a[1].shape, np.int64), axis=int(b.attrs["axis"])),
    "relax.split": _np_split,
    "relax.concat": lambda b, a, g: np.concatenate(a[0], axis=int(b.attrs["axis"])),
    "relax.nn.conv2d": _np_conv_shape,
    "relax.nn.max_pool2d": _np_pool_shape,
    "relax.nn.avg_pool2d": _np_pool_shape,
    "relax.nn.adaptive_avg_pool2d": lambda b, a, g: np.zeros((*a[0].shape[:2], 1, 1), np.float32),
}


def torch_ops() -> dict[str, Callable]:
    """The PyTorch eager call for each relax op (imports torch)."""
    import torch
    import torch.nn.functional as F

    def conv2d(b, args, graph):
        a = b.attrs
        top, left, bottom, right = _ints(a["padding"])
        x = args[0]
        if (top, left) != (bottom, right):
            x = F.pad(x, (left, right, top, bottom))
            top = left = 0
        return F.conv2d(x, args[1], None, _ints(a["strides"]), (top, left), _ints(a["dilation"]), int(a["groups"]))

    def pool(b, args, graph):
        a = b.attrs
        pad = _sym_pads(a["padding"], b.op)
        if b.op.endswith("max_pool2d"):
            return F.max_pool2d(args[0], _ints(a["pool_size"]), _ints(a["strides"]), pad, _ints(a["dilation"]),
                                ceil_mode=bool(a.get("ceil_mode")))
        return F.avg_pool2d(args[0], _ints(a["pool_size"]), _ints(a["strides"]), pad,
                            ceil_mode=bool(a.get("ceil_mode")), count_include_pad=bool(a.get("count_include_pad")))

    def split(b, args, graph):
        return torch.split(args[0], _split_sizes(graph, b.args[0], b.attrs), dim=int(b.attrs["axis"]))

    dtypes = {"float32": torch.float32, "int32": torch.int32, "int64": torch.int64}
    return {
        "relax.add": lambda b, a, g: a[0] + a[1],
        "relax.multiply": lambda b, a, g: a[0] * a[1],
        "relax.subtract": lambda b, a, g: a[0] - a[1],
        "relax.divide": lambda b, a, g: a[0] / a[1],
        "relax.matmul": lambda b, a, g: torch.matmul(a[0], a[1]),
        "relax.nn.relu": lambda b, a, g: F.relu(a[0]),
        "relax.tanh": lambda b, a, g: torch.tanh(a[0]),
        "relax.sigmoid": lambda b, a, g: torch.sigmoid(a[0]),
        "relax.exp": lambda b, a, g: torch.exp(a[0]),
        "relax.clip": lambda b, a, g: torch.clamp(a[0], a[1], a[2]),
        "relax.nn.gelu": lambda b, a, g: F.gelu(a[0]),
        "relax.nn.softmax": lambda b, a, g: torch.softmax(a[0], int(b.attrs["axis"])),
        "relax.nn.layer_norm": lambda b, a, g: F.layer_norm(a[0], (a[0].shape[-1],), a[1], a[2],
                                                              float(b.attrs["epsilon"])),
        "relax.astype": lambda b, a, g: a[0].to(dtypes[b.attrs["dtype"]]),
        "relax.reshape": lambda b, a, g: a[0].reshape(a[1]),
        "relax.permute_dims": lambda b, a, g: a[0].permute(*_ints(b.attrs["axes"])),
        "relax.take": lambda b, a, g: torch.index_select(a[0], int(b.attrs["axis"]), a[1].reshape(-1).long())
        .reshape(*a[1].shape, *a[0].shape[int(b.attrs["axis"]) + 1:]),
        "relax.split": split,
        "relax.concat": lambda b, a, g: torch.cat(a[0], int(b.attrs["axis"])),
        "relax.nn.conv2d": conv2d,
        "relax.nn.max_pool2d": pool,
        "relax.nn.avg_pool2d": pool,
        "relax.nn.adaptive_avg_pool2d": lambda b, a, g: F.adaptive_avg_pool2d(a[0], 1),
    }


class TorchEager:
    """``mod['main']`` as PyTorch eager calls, one per op, with the weights held as tensors."""

    def __init__(self, mod, weights: Sequence[np.ndarray], device: str = "cpu"):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.graph = read_graph(mod)
        _static_shapes(self.graph)  # split sizes, once, outside the timed calls
        self.ops = torch_ops()
        self.set_weights(weights)

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        self.fixed = {name: self._tensor(w) for (name, _, _), w in zip(self.graph.weights, weights)}
        self.fixed.update({name: self._tensor(v) for name, v in self.graph.constants.items()})

    def _tensor(self, array: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    def _run(self, values: dict) -> list:
        with self.torch.no_grad():
            return run_bindings(self.graph, {**self.fixed, **values}, self.ops)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        values = {name: self._tensor(x) for (name, _, _), x in zip(self.graph.inputs, inputs)}
        return [o.cpu().numpy() for o in self._run(values)]

    def time_ms(self, inputs: Sequence[np.ndarray]) -> float:
        """One call on inputs already on the device, synchronised (as TVM's libraries are timed)."""
        import time

        values = {name: self._tensor(x) for (name, _, _), x in zip(self.graph.inputs, inputs)}
        synchronize = self.torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        synchronize()
        begin = time.perf_counter()
        self._run(values)
        synchronize()
        return (time.perf_counter() - begin) * 1e3
