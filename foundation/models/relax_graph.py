"""A Relax graph's ``main`` read as bindings, one high-level op each, for emitting it in other engines' terms.

The zoo's networks are written in Relax (foundation.models); onnxruntime and PyTorch need the
same network with the same weights. Emitters (foundation.models.onnx_export, bench/relax_graph.py
for PyTorch) walk the ops of ``main`` before legalization one binding at a time, so whatever a
model is made of either translates op for op or is refused by name; nothing is re-implemented
per architecture. ``main``'s parameters are the model's inputs then its weights (``num_input``
says where they split). Callers check an emitted model's outputs against TVM's before trusting it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


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
    # Every value's shape, worked out once (static_shapes), kept with the graph it belongs to.
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)


def _scalar(value):
    """A Python number from an IntImm/FloatImm or a plain number."""
    return getattr(value, "value", value)


def ints(values) -> list[int]:
    return [int(_scalar(v)) for v in values]


def _tensor_type(expr) -> tuple[tuple[int, ...], str]:
    ty = expr.ty
    return tuple(ints(ty.shape.values)), str(ty.dtype)


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
                        args.append(tuple(ints(arg.values)))
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


def expand_tuple_outputs(graph: Graph) -> list[str]:
    """The graph's outputs with tuples flattened (BERT returns (hidden states, pooled))."""
    tuples = {b.out: list(b.args) for b in graph.bindings if b.op == "tuple"}
    aliases = {b.out: b.args[0] for b in graph.bindings if b.op == "alias"}
    flat: list[str] = []

    def add(name: str) -> None:
        name = aliases.get(name, name)
        if name in tuples:
            for part in tuples[name]:
                add(part)
        else:
            flat.append(name)

    for name in graph.outputs:
        add(name)
    return flat


def sym_pads(padding: Sequence[int], what: str) -> tuple[int, int]:
    top, left, bottom, right = ints(padding)
    if (top, left) != (bottom, right):
        raise Unsupported(f"asymmetric padding {list(padding)} of {what}")
    return top, left


def split_sizes(graph: Graph, source: str, attrs: dict) -> list[int]:
    """relax.split's indices (or section count) as the sizes ONNX and PyTorch take."""
    dim = static_shapes(graph)[source][int(attrs["axis"])]
    spec = attrs["indices_or_sections"]
    if isinstance(spec, (int, float)):
        sections = int(spec)
        return [dim // sections] * sections
    bounds = [0, *ints(spec), dim]
    return [bounds[i + 1] - bounds[i] for i in range(len(bounds) - 1)]


def static_shapes(graph: Graph) -> dict[str, tuple[int, ...]]:
    """Every value's shape, by running the graph on zeros with numpy (cheap for what split needs)."""
    if graph.shapes:
        return graph.shapes
    values: dict[str, object] = {n: np.zeros(s, d) for n, s, d in [*graph.inputs, *graph.weights]}
    values.update(graph.constants)
    shapes = run_bindings(graph, values, _NUMPY_OPS, stop_at_split_source=True)
    graph.shapes.update(shapes)
    return graph.shapes


# ---------------------------------------------------------------- an eager interpreter (numpy, for shapes)


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
                raise Unsupported(f"op {b.op} (no eager translation)")
            values[b.out] = fn(b, args, graph)
        if stop_at_split_source:
            value = values[b.out]
            if hasattr(value, "shape"):
                shapes[b.out] = tuple(value.shape)
    if stop_at_split_source:
        shapes.update({n: tuple(s) for n, s, _ in [*graph.inputs, *graph.weights]})
        return shapes
    return [values[name] for name in expand_tuple_outputs(graph)]


def _np_split(b, args, graph):
    spec = b.attrs["indices_or_sections"]
    axis = int(b.attrs["axis"])
    if isinstance(spec, (int, float)):
        return tuple(np.split(args[0], int(spec), axis=axis))
    return tuple(np.split(args[0], ints(spec), axis=axis))


def _np_conv_shape(b, args, graph):
    x, w = args[0], args[1]
    a = b.attrs
    (sh, sw), (dh, dw) = ints(a["strides"]), ints(a["dilation"])
    top, left, bottom, right = ints(a["padding"])
    kh, kw = w.shape[2], w.shape[3]
    h = (x.shape[2] + top + bottom - dh * (kh - 1) - 1) // sh + 1
    wd = (x.shape[3] + left + right - dw * (kw - 1) - 1) // sw + 1
    return np.zeros((x.shape[0], w.shape[0], h, wd), np.float32)


def _np_pool_shape(b, args, graph):
    x = args[0]
    a = b.attrs
    (kh, kw), (sh, sw) = ints(a["pool_size"]), ints(a["strides"])
    top, left, bottom, right = ints(a["padding"])
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
    "relax.permute_dims": lambda b, a, g: np.transpose(a[0], ints(b.attrs["axes"])),
    "relax.take": lambda b, a, g: np.take(a[0], np.zeros(a[1].shape, np.int64), axis=int(b.attrs["axis"])),
    "relax.split": _np_split,
    "relax.concat": lambda b, a, g: np.concatenate(a[0], axis=int(b.attrs["axis"])),
    "relax.nn.conv2d": _np_conv_shape,
    "relax.nn.max_pool2d": _np_pool_shape,
    "relax.nn.avg_pool2d": _np_pool_shape,
    "relax.nn.adaptive_avg_pool2d": lambda b, a, g: np.zeros((*a[0].shape[:2], 1, 1), np.float32),
}

