"""A file `farm export` wrote, loaded again: its spec read and its sha256 checked, its library on this device."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from farm.export import EXPORT_FORMAT, spec_path
from foundation.errors import BadInput, NotFound, path_error

if TYPE_CHECKING:  # pragma: no cover
    from foundation.runtime.library_runner import LoadedLibrary


@dataclass
class ExportedModel:
    """An exported library loaded here, with the spec beside it; called with the model's inputs only."""

    path: Path
    spec: dict
    library: "LoadedLibrary"

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.check_inputs(inputs)
        return self.library(inputs)

    def example_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """The seeded inputs `farm.load(...).example_inputs(seed)` gives for the same model."""
        from foundation.models.loaded import TensorSpec, random_inputs

        return random_inputs([TensorSpec.from_json(s) for s in self.spec["inputs"]], seed)

    def check_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        specs = self.spec["inputs"]
        if len(inputs) != len(specs):
            raise BadInput(f"{self.path.name} takes {len(specs)} input(s), got {len(inputs)}",
                           "pass one array per model input")
        for given, spec in zip(inputs, specs):
            shape, dtype = tuple(getattr(given, "shape", ())), str(getattr(given, "dtype", ""))
            if shape != tuple(spec["shape"]) or dtype != spec["dtype"]:
                raise BadInput(f"input '{spec['name']}' must be {spec['dtype']}{list(spec['shape'])}, got "
                               f"{getattr(given, 'dtype', type(given).__name__)}{list(getattr(given, 'shape', []))}",
                               "reshape/cast the array, or export the model with the batch you need")


def is_exported(model: str) -> bool:
    """Whether `farm run MODEL` names an exported library rather than a model."""
    return model.endswith(".so")


def load_exported(path: Path, threads: int | str | None = "auto") -> ExportedModel:
    """The library at ``path`` and its spec, checked against each other; NotFound or BadInput otherwise."""
    from foundation.runtime.library_runner import LoadedLibrary

    spec_file = spec_path(path)
    for needed in (path, spec_file):
        if not needed.is_file():
            raise NotFound(f"no such file: {needed}", "give a library written by `farm export`, its .json beside it")
    try:
        library = path.read_bytes()
        spec = json.loads(spec_file.read_text())
    except OSError as err:
        raise path_error(err, doing="read") from None
    except ValueError as err:
        raise BadInput(f"{spec_file} is not JSON: {err}", "export the model again with `farm export`") from None
    if not isinstance(spec, dict) or spec.get("format") != EXPORT_FORMAT:
        raise BadInput(f"{spec_file} is not the spec of an exported library ({EXPORT_FORMAT})",
                       "export the model again with `farm export`")
    if hashlib.sha256(library).hexdigest() != spec.get("sha256"):
        raise BadInput(f"{path} is not the library {spec_file.name} describes (its sha256 differs)",
                       "export the model again with `farm export`")
    kind = "cuda" if spec.get("device") == "cuda" else "llvm"
    stored_ms = (spec.get("latency_ms") or {}).get("median")
    try:
        loaded = LoadedLibrary(library, kind, threads=threads, stored_latency_ms=stored_ms)
    except Exception as err:  # TVM's runtime refused it: another TVM, another device, a damaged build
        raise BadInput(f"{path} cannot be loaded here: {err}", "export it again on a box like this one") from None
    loaded.set_weights([])  # bound into the library
    return ExportedModel(path, spec, loaded)
