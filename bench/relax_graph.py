"""A zoo model's Relax graph as PyTorch eager calls; its ONNX form is the product's (foundation.models.onnx_export).

Both walk ``main``'s high-level ops one binding at a time (foundation.models.relax_graph), so
whatever a zoo model is made of either translates op for op or is refused by name. In
PyTorch the weights are tensors passed to every call. Callers check the outputs against TVM's
before trusting either.

    from foundation.models.loading import load_model
    model = load_model("bert", 1)
    onnx_model = to_onnx(model.mod, model.make_weights(0))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from foundation.models.onnx_export import IR_VERSION, OPSET, to_onnx
from foundation.models.relax_graph import (
    Binding,
    Graph,
    Unsupported,
    ints,
    read_graph,
    run_bindings,
    split_sizes,
    static_shapes,
    sym_pads,
)

__all__ = ["IR_VERSION", "OPSET", "Binding", "Graph", "TorchCompiled", "TorchEager", "Unsupported", "read_graph",
           "to_onnx", "torch_ops"]


def torch_ops() -> dict[str, Callable]:
    """The PyTorch eager call for each relax op (imports torch)."""
    import torch
    import torch.nn.functional as F

    def conv2d(b, args, graph):
        a = b.attrs
        top, left, bottom, right = ints(a["padding"])
        x = args[0]
        if (top, left) != (bottom, right):
            x = F.pad(x, (left, right, top, bottom))
            top = left = 0
        return F.conv2d(x, args[1], None, ints(a["strides"]), (top, left), ints(a["dilation"]), int(a["groups"]))

    def pool(b, args, graph):
        a = b.attrs
        pad = sym_pads(a["padding"], b.op)
        if b.op.endswith("max_pool2d"):
            return F.max_pool2d(args[0], ints(a["pool_size"]), ints(a["strides"]), pad, ints(a["dilation"]),
                                ceil_mode=bool(a.get("ceil_mode")))
        return F.avg_pool2d(args[0], ints(a["pool_size"]), ints(a["strides"]), pad,
                            ceil_mode=bool(a.get("ceil_mode")), count_include_pad=bool(a.get("count_include_pad")))

    def split(b, args, graph):
        return torch.split(args[0], split_sizes(graph, b.args[0], b.attrs), dim=int(b.attrs["axis"]))

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
        "relax.permute_dims": lambda b, a, g: a[0].permute(*ints(b.attrs["axes"])),
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
        static_shapes(self.graph)  # split sizes, once, outside the timed calls
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


class TorchCompiled(TorchEager):
    """The same calls through `torch.compile` (its default backend, Inductor: C++ on CPUs), the weights
    and inputs passed as arguments so a change of weights is new data, not a recompile. The first
    call compiles (tens of seconds): the caller's first, untimed call pays it."""

    def __init__(self, mod, weights: Sequence[np.ndarray], device: str = "cpu"):
        super().__init__(mod, weights, device)
        graph, ops = self.graph, self.ops
        self.compiled = self.torch.compile(lambda fixed, values: run_bindings(graph, {**fixed, **values}, ops),
                                           dynamic=False)

    def _run(self, values: dict) -> list:
        with self.torch.no_grad():
            return self.compiled(self.fixed, values)
