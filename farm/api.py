"""Use a farm-tuned model from Python: fetch its library from the registry and call it.

    import farm
    model = farm.load("resnet-18", "llvm", batch=1)
    (logits,) = model(model.example_inputs())
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from farm.session import open_context
from foundation.domain.weights_layout import WeightsLayout
from foundation.errors import BadInput, FarmError, NotFound, RegistryError
from foundation.job_driver.artifacts import library_problem
from foundation.models.model_key import ModelKey, model_key

if TYPE_CHECKING:  # pragma: no cover
    from foundation.registry.entities import Artifact, Model
    from foundation.runtime.library_runner import Latency, LoadedLibrary


@dataclass
class DeployedModel:
    """A tuned library loaded on this device, with its weights already uploaded."""

    key: ModelKey
    model: "Model"
    artifact: "Artifact"
    library: "LoadedLibrary"
    fingerprint: str

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = tuple(inputs[0])
        self._check_inputs(inputs)
        return self.library(inputs)

    def example_inputs(self, seed: int = 0) -> list[np.ndarray]:
        from foundation.models.loaded import TensorSpec, random_inputs

        return random_inputs([TensorSpec.from_json(s) for s in self.model.inputs], seed)

    def time(self, inputs: Sequence[np.ndarray], runs: int = 20, warmup: int = 3) -> "Latency":
        self._check_inputs(inputs)
        return self.library.time(inputs, runs=runs, warmup=warmup)

    def _check_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        specs = self.model.inputs
        if len(inputs) != len(specs):
            raise FarmError(f"{self.key.name} takes {len(specs)} input(s), got {len(inputs)}",
                            "pass one array per model input")
        for given, spec in zip(inputs, specs):
            if tuple(given.shape) != tuple(spec["shape"]) or str(given.dtype) != spec["dtype"]:
                raise FarmError(
                    f"input '{spec['name']}' must be {spec['dtype']}{list(spec['shape'])}, "
                    f"got {given.dtype}{list(given.shape)}",
                    "reshape/cast the array, or submit the model with the batch you need",
                )


def load(model: str, target: str = "llvm", batch: int = 1, *, registry: str | None = None,
         weights: Sequence[np.ndarray] | None = None, seed: int = 0,
         weights_layout: str | None = None) -> DeployedModel:
    """Load the newest valid artifact for (model, target, batch) on this box's fingerprint.

    No compilation happens: the stored library is checked against its sha256 and loaded.
    Zoo models get seeded random weights unless ``weights`` is given; ONNX models get the
    file's own weights. Weights are always plain: a prepacked library rearranges them once,
    here. ``weights_layout`` ("plain", "prepacked" or "prepacked-nchwc") loads only an artifact
    of that form; by default the newest of any.
    """
    from foundation.registry.engine import RegistryMissing
    from foundation.runtime.library_runner import LoadedLibrary

    key = model_key(model, batch)
    forms = [form.value for form in WeightsLayout]
    if weights_layout is not None and weights_layout not in forms:
        raise BadInput(f"unknown weights layout {weights_layout!r}", f"use {', '.join(forms)}, or leave it out (any)")
    try:
        ctx = open_context(registry, target)
    except RegistryMissing as missing:
        raise NotFound(f"no tuned library for {key.describe()}: {missing.problem}",
                       f"run `farm submit {model} {target} {batch}` first") from None
    stored = ctx.store.find_model(key.name, key.batch, key.source_digest)
    artifact = None
    if stored is not None:
        artifact = ctx.store.find_artifact(stored.id, ctx.target_json, ctx.fingerprint.id, ctx.tvm_version,
                                           weights_layout)
    if stored is None or artifact is None:
        raise NotFound(
            f"no tuned {f'{weights_layout} ' if weights_layout else ''}library for {key.describe()} "
            f"on {ctx.target['kind']} "
            f"(fingerprint {ctx.fingerprint.id}, TVM {ctx.tvm_version}) in the registry",
            f"run `farm submit {model} {target} {batch}` first",
        )
    library = ctx.store.get_artifact_library(artifact.id)
    problem = library_problem(artifact, library)
    if problem is not None:
        raise RegistryError(
            f"artifact {artifact.id} is corrupt: {problem}",
            f"re-tune it with `farm submit {model} {target} {batch} --retune`",
        )
    if weights is None:
        weights = _weights_for(key, stored, seed)
    try:
        loaded = LoadedLibrary(library, ctx.target["kind"])
    except Exception as err:  # a library that passes sha256 but not the loader
        raise RegistryError(f"artifact {artifact.id} cannot be loaded: {err}",
                        f"re-tune it with `farm submit {model} {target} {batch} --retune`") from None
    loaded.set_weights(weights)
    return DeployedModel(key, stored, artifact, loaded, ctx.fingerprint.id)


def _weights_for(key: ModelKey, stored: "Model", seed: int) -> list[np.ndarray]:
    if key.source == "onnx":
        from foundation.models.onnx_import import load_onnx_model

        return load_onnx_model(key.path, key.batch).make_weights(seed)
    from foundation.models.loaded import TensorSpec, random_weights

    return random_weights([TensorSpec.from_json(s) for s in stored.weights], seed)
