"""A model ready to tune: a Relax module, the specs of its inputs and weights, and how to fill them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from foundation.domain.request_limits import BATCH, shown_number
from foundation.errors import FarmError

if TYPE_CHECKING:
    import tvm


@dataclass(frozen=True)
class Fill:
    """How to draw one tensor's seeded values.

    Tuning does not depend on values, but running the model does: token ids must be valid
    indices, and weights must keep activations finite through a 152-layer network.
    """

    kind: str  # "normal" (std=a), "const" (a), "uniform" ([a, b)), "randint" ([a, b))
    a: float = 0.0
    b: float = 0.0

    @staticmethod
    def normal(std: float) -> Fill:
        return Fill("normal", std)

    @staticmethod
    def const(value: float) -> Fill:
        return Fill("const", value)

    @staticmethod
    def randint(low: int, high: int) -> Fill:
        return Fill("randint", low, high)

    @staticmethod
    def he(shape: tuple[int, ...]) -> Fill:
        """He (fan-in) scaling for a weight laid out [out, in, *kernel]; zeros for vectors."""
        if len(shape) < 2:
            return Fill.const(0.0)
        fan_in = int(np.prod(shape[1:], dtype=np.int64))
        return Fill.normal(float(np.sqrt(2.0 / max(fan_in, 1))))

    def to_json(self) -> dict:
        return {"kind": self.kind, "a": self.a, "b": self.b}

    @staticmethod
    def from_json(d: dict) -> Fill:
        return Fill(d["kind"], float(d["a"]), float(d["b"]))

    def draw(self, rng: np.random.Generator, spec: TensorSpec) -> np.ndarray:
        dtype = np.dtype(spec.dtype)
        if self.kind == "const":
            return np.full(spec.shape, self.a, dtype=dtype)
        if self.kind == "randint":
            return rng.integers(int(self.a), int(self.b), size=spec.shape).astype(dtype)
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b, size=spec.shape).astype(dtype)
        if self.kind == "normal":
            if dtype.kind == "f":
                return (rng.standard_normal(spec.shape, dtype=np.float32) * np.float32(self.a)).astype(
                    dtype, copy=False
                )
            return (rng.standard_normal(spec.shape) * self.a).astype(dtype)
        raise ValueError(f"unknown fill kind {self.kind!r}")


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one graph input or weight, and how to draw its seeded values.

    ``fill`` rides along (and into to_json) so that whoever holds only the specs, e.g. from the
    registry, draws the same seeded tensors as the LoadedModel did. It is not part of equality
    or of the model's identity: values do not change the code that gets tuned.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    fill: Fill | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def to_json(self) -> dict:
        d = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.fill is not None:
            d["fill"] = self.fill.to_json()
        return d

    @staticmethod
    def from_json(d: dict) -> TensorSpec:
        fill = Fill.from_json(d["fill"]) if d.get("fill") else None
        return TensorSpec(d["name"], tuple(int(x) for x in d["shape"]), d["dtype"], fill)

    def structure_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


def default_input_fill(spec: TensorSpec) -> Fill:
    """Fill for an input nobody described: floats ~N(0, 1), integers in {0, 1} (safe as ids and masks)."""
    if np.dtype(spec.dtype).kind == "f":
        return Fill.normal(1.0)
    return Fill.randint(0, 2)


def random_inputs(specs: list[TensorSpec], seed: int = 0) -> list[np.ndarray]:
    """Seeded input values; the same specs and seed give the same arrays in any process."""
    rng = np.random.default_rng(seed)
    return [(spec.fill or default_input_fill(spec)).draw(rng, spec) for spec in specs]


def random_weights(specs: list[TensorSpec], seed: int = 0) -> list[np.ndarray]:
    """Seeded weight values (He fan-in scaling unless a spec says otherwise)."""
    # A separate stream from the inputs, so the same seed gives unrelated tensors.
    rng = np.random.default_rng([seed, 1])
    return [(spec.fill or Fill.he(spec.shape)).draw(rng, spec) for spec in specs]


@dataclass
class LoadedModel:
    """A Relax model whose ``main`` takes ``(*inputs, *weights)``; weights are never graph constants."""

    name: str
    source: str
    source_digest: str
    batch: int
    mod: tvm.IRModule
    inputs: list[TensorSpec]
    weights: list[TensorSpec]
    # The real weights (ONNX); when set, make_weights returns them and ignores the seed.
    weight_values: list[np.ndarray] | None = field(default=None, repr=False, compare=False)
    _identity: tuple[object, str, str] | None = field(default=None, init=False, repr=False, compare=False)

    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        return random_inputs(self.inputs, seed)

    def make_weights(self, seed: int = 0) -> list[np.ndarray]:
        if self.weight_values is not None:
            return list(self.weight_values)
        return random_weights(self.weights, seed)

    @property
    def num_parameters(self) -> int:
        return sum(w.size for w in self.weights)

    def identity(self) -> str:
        """What the tuned code depends on: the graph's text and the input specs, not weight values."""
        inputs_json = json.dumps([s.structure_json() for s in self.inputs], sort_keys=True)
        # Printing a large module takes a while; reuse the digest while mod and inputs are unchanged.
        cached = self._identity
        if cached is not None and cached[0] is self.mod and cached[1] == inputs_json:
            return cached[2]
        digest = hashlib.sha256()
        digest.update(self.mod.script().encode())
        digest.update(inputs_json.encode())
        self._identity = (self.mod, inputs_json, digest.hexdigest())
        return self._identity[2]


def check_batch(batch: int) -> None:
    """Refuse a batch that is not a positive integer, before any work starts."""
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise FarmError(f"batch must be a positive integer, got {batch!r}", "pass a batch size of 1 or more")
    if batch < 1:
        raise FarmError(f"batch must be at least 1, got {batch}", "pass a positive batch size, e.g. 1")
    if batch > BATCH.high:
        raise FarmError(f"batch must be at most {BATCH.high:,}, got {shown_number(batch)}",
                        f"pass a batch size from 1 to {BATCH.high:,}")
