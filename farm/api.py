"""Use a farm-tuned model from Python: fetch its library from the registry and call it.

    import farm
    model = farm.load("resnet-18", "llvm", batch=1)
    (logits,) = model(model.example_inputs())
    model = farm.load("resnet-18", "llvm", 1, weights={"conv1.weight": w1, ...})  # your own, by name
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from farm import arguments
from farm.session import open_context
from foundation.domain.weights_layout import WeightsLayout
from foundation.errors import BadInput, FarmError, NotFound, RegistryError, out_of_resources
from foundation.job_driver.hits import library_problem, library_scopes
from foundation.models.model_key import ModelKey

if TYPE_CHECKING:  # pragma: no cover
    from farm.export import Exported
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
    registry: str | None = None  # the registry it was loaded from (None: the default one)

    def export(self, path) -> "Exported":
        """Write the library with its weights bound in to ``path`` (.so) and its spec beside it (.json):
        TVM's runtime alone runs it, `main` taking the model's inputs only (farm.export)."""
        from farm.export import export_library

        return export_library(self, path)

    def __call__(self, *inputs, output: str = "numpy") -> list:
        """The model's outputs for its inputs: ``model(x)``, ``model(x, y)``, ``model([x, y])`` or by name,
        ``model({"x": x})``; each a numpy array or any DLPack-capable CPU tensor (torch ...). Outputs are numpy
        arrays, or with ``output="dlpack"`` TVM tensors on the model's device that any DLPack consumer takes."""
        from farm.call_arguments import call_inputs, call_outputs, check_output

        check_output(output)
        inputs = call_inputs(inputs, self.model.inputs, self.key.name)
        self.check_inputs(inputs)
        return call_outputs(self.library(inputs), output, self.library.device)

    @property
    def weight_specs(self) -> list[dict]:
        """Each weight ``load(weights={name: array})`` takes: its name, shape and dtype."""
        return [{"name": s["name"], "shape": list(s["shape"]), "dtype": s["dtype"]} for s in self.model.weights]

    def example_inputs(self, seed: int = 0) -> list[np.ndarray]:
        from foundation.domain import request_limits as limits
        from foundation.models.loaded import TensorSpec, random_inputs

        limits.check_number("seed", seed, limits.SEED)
        return random_inputs([TensorSpec.from_json(s) for s in self.model.inputs], seed)

    def time(self, inputs: Sequence[np.ndarray], runs: int = 20, warmup: int = 3) -> "Latency":
        from foundation.domain import request_limits as limits

        limits.check_number("runs", runs, limits.VALIDATION_RUNS)
        limits.check_number("warmup", warmup, limits.WARMUP_RUNS)
        if isinstance(inputs, np.ndarray):  # one array, as a call takes it
            inputs = [inputs]
        self.check_inputs(inputs)
        return self.library.time(inputs, runs=runs, warmup=warmup)

    def check_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        """FarmError unless each input has the shape and dtype the model takes; anything with a
        ``shape`` and a ``dtype`` (a .npy file's header) is checked as an array would be."""
        specs = self.model.inputs
        if not isinstance(inputs, (list, tuple)):
            raise BadInput(f"inputs must be a list of arrays, one per model input, got {_described(inputs)}",
                           "e.g. model.time([x]), or model.time(model.example_inputs())")
        if len(inputs) != len(specs):
            raise FarmError(f"{self.key.name} takes {len(specs)} input(s), got {len(inputs)}",
                            "pass one array per model input")
        for given, (shape, dtype), spec in zip(inputs, self._input_layout, specs):
            if getattr(given, "shape", None) != shape or getattr(given, "dtype", None) != dtype:
                raise FarmError(
                    f"input '{spec['name']}' must be {spec['dtype']}{list(spec['shape'])}, "
                    f"got {_described(given)}",
                    "reshape/cast the array, or submit the model with the batch you need",
                )

    @functools.cached_property
    def _input_layout(self) -> list[tuple[tuple[int, ...], np.dtype]]:
        """Each input's shape and dtype as numpy spells them: a call compares, never converts."""
        return [(tuple(spec["shape"]), np.dtype(spec["dtype"])) for spec in self.model.inputs]


def _described(given) -> str:
    if hasattr(given, "shape") and hasattr(given, "dtype"):
        return f"{given.dtype}{list(given.shape)}"
    return f"a {type(given).__name__}, not a numpy array"


def load(model, target: str | Mapping = "llvm", batch: int = 1, *, registry: str | None = None,
         weights: Mapping[str, np.ndarray] | Sequence[np.ndarray] | None = None, seed: int = 0,
         weights_layout: str | None = None, threads: int | str = "auto",
         fingerprint: str | None = None, shapes: dict | None = None, example_inputs=None) -> DeployedModel:
    """Load the newest valid artifact for (model, target, batch) on this box's fingerprint.
    ``target`` is what `farm submit` takes: llvm, cuda, or a TVM target as JSON text or a dict.

    No compilation happens: the stored library is checked against its sha256 and loaded.
    Zoo models get seeded random weights unless ``weights`` is given; ONNX models get the
    file's own weights, torch modules their own. ``model``, ``shapes`` and ``example_inputs`` are
    what farm.submit took: the same model, shapes and example shapes find its library.
    ``weights`` maps every weight's name to its array (``weight_specs`` of
    a loaded model lists them); a list in the order of those specs is taken too. A missing,
    unknown or misshapen weight is refused (BadInput) by name. Weights are always plain: a
    prepacked library rearranges them once, here. ``weights_layout`` ("plain", "prepacked" or
    "prepacked-nchwc") loads only an artifact of that form; by default the newest of any.
    ``threads``: how many threads its kernels run on, or "auto": what its validation chose, one
    thread for a library under a millisecond on one thread that costs at most 1.5x its time on
    every core (robust on a box whose cores are busy), else every core, stepping back to one
    thread while its calls say other work holds the cores (foundation.runtime.threads,
    foundation.runtime.busy_backoff).
    Without a library of this box's fingerprint, the newest of a compatible one (this CPU at
    another core count or cache share, nearest first) is loaded: ``DeployedModel.artifact``'s
    ``fingerprint_id`` says whose. ``fingerprint`` names one such fingerprint to load from.
    """
    from farm.model_sources import model_source
    from foundation.domain import request_limits as limits
    from foundation.registry.engine import RegistryMissing
    from foundation.runtime.library_runner import LoadedLibrary
    from foundation.runtime.threads import parse_threads

    target = arguments.target_text(target)
    source = model_source(model, batch, shapes, example_inputs)
    key, model = source.keyed(batch), source.named
    registry = arguments.optional_text("registry", registry, 'registry="sqlite:///farm.db"', limits.MAX_TEXT_LENGTH)
    limits.check_number("seed", seed, limits.SEED)
    threads = parse_threads(threads)
    weights_layout = arguments.optional_text("weights_layout", weights_layout, 'weights_layout="plain"', 32)
    fingerprint = arguments.optional_text("fingerprint", fingerprint, 'fingerprint="cpu-..."')
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
    # This box's library, else one of this CPU at another size, nearest first (or the one named).
    scopes = library_scopes(ctx.store, ctx.target_json, ctx.fingerprint.id, ctx.fingerprint.details,
                            chosen=fingerprint)
    for scope in scopes if stored is not None else ():
        artifact = ctx.store.find_artifact(stored.id, scope.target_json, scope.fingerprint_id, ctx.tvm_version,
                                           weights_layout)
        if artifact is not None:
            break
    if stored is None or artifact is None:
        named = fingerprint or ctx.fingerprint.id
        others = "" if fingerprint or len(scopes) == 1 else f" nor of {len(scopes) - 1} compatible ones"
        raise NotFound(
            f"no tuned {f'{weights_layout} ' if weights_layout else ''}library for {key.describe()} "
            f"on {ctx.target['kind']} "
            f"(fingerprint {named}{others}, TVM {ctx.tvm_version}) in the registry",
            f"run `farm submit {model} {target} {batch}` first",
        )
    library = ctx.store.get_artifact_library(artifact.id)
    problem = library_problem(artifact, library)
    if problem is not None:
        raise RegistryError(
            f"artifact {artifact.id} is corrupt: {problem}",
            f"re-tune it with `farm submit {model} {target} {batch} --retune`",
        )
    if weights is None and source.program is not None:  # a torch module's own weights
        from foundation.models.torch_import import loaded_from_program

        weights = loaded_from_program(source.program, key.name, key.source_digest, key.batch).make_weights()
    weights = _weights_for(key, stored, seed) if weights is None else matched_weights(key, stored.weights, weights)
    try:
        loaded = LoadedLibrary(library, ctx.target["kind"], threads=threads,
                               stored_latency_ms=artifact.latency_median_ms,
                               stored_threads=(artifact.speed or {}).get("threads"))
    except Exception as err:  # a library that passes sha256 but not the loader
        box = out_of_resources(err)  # or this box out of disk, files or processes while it was written or loaded
        if box is not None:
            raise box from None
        raise RegistryError(f"artifact {artifact.id} cannot be loaded: {err}",
                        f"re-tune it with `farm submit {model} {target} {batch} --retune`") from None
    loaded.set_weights(weights)
    return DeployedModel(key, stored, artifact, loaded, ctx.fingerprint.id, registry)


def _weights_for(key: ModelKey, stored: "Model", seed: int) -> list[np.ndarray]:
    if key.source == "onnx":
        from foundation.models.onnx_import import load_onnx_model

        return load_onnx_model(key.path, key.batch).make_weights(seed)
    from foundation.models.loaded import TensorSpec, random_weights

    return random_weights([TensorSpec.from_json(s) for s in stored.weights], seed)


def matched_weights(key: ModelKey, specs: Sequence[dict], weights: Mapping[str, np.ndarray] | Sequence[np.ndarray]
                    ) -> list[np.ndarray]:
    """``weights`` in the order of the model's weight ``specs``, each checked against its spec."""
    names = [spec["name"] for spec in specs]
    listed = f"{key.name}'s weights are {_some(names)}"
    if isinstance(weights, Mapping):
        unknown = [name for name in weights if name not in names]
        if unknown:
            raise BadInput(f"{key.name} has no weight named {_some(unknown)}",
                           f"{listed} (DeployedModel.weight_specs lists them)")
        missing = [name for name in names if name not in weights]
        if missing:
            raise BadInput(f"weight {_some(missing)} of {key.name} is missing", f"pass every weight by name; {listed}")
        ordered = [weights[name] for name in names]
    elif isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise BadInput(f"weights must map each weight's name to its array, or list them in order, got "
                       f"{type(weights).__name__}", f"pass weights={{name: array}}; {listed}")
    else:
        ordered = list(weights)
        if len(ordered) != len(names):
            raise BadInput(f"{key.name} takes {len(names)} weights, got {len(ordered)}",
                           "pass them by name: weights={name: array} (DeployedModel.weight_specs lists them)")
    checked = []
    for spec, value in zip(specs, ordered):
        array = np.asarray(value)
        if tuple(array.shape) != tuple(spec["shape"]) or str(array.dtype) != spec["dtype"]:
            raise BadInput(f"weight {spec['name']!r} of {key.name} must be {spec['dtype']}{list(spec['shape'])}, "
                           f"got {array.dtype}{list(array.shape)}",
                           "pass the plain (untransformed) weight with that shape and dtype")
        checked.append(array)
    return checked


def _some(names: Sequence[str], shown: int = 5) -> str:
    """'a', 'b' and 3 more"""
    quoted = ", ".join(repr(n) for n in names[:shown])
    return quoted + (f" and {len(names) - shown} more" if len(names) > shown else "")
