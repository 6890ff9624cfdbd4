"""Name a model without building it: the key under which the registry answers hits.

A hit must cost well under a second, so the lookup key is computed without TVM: a zoo name
and its architecture version, or an ONNX model's content hash (a file's bytes, an in-memory
ModelProto's serialized bytes: the same model hashes the same), plus the batch. Named dimensions
given as ``shapes`` are written into the model first, so they are part of its hash.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from foundation.errors import BadInput, NotFound, path_error
from foundation.models import stored_models
from foundation.models.loaded import check_batch


@dataclass(frozen=True)
class ModelKey:
    name: str
    batch: int
    source: str  # "zoo" or "onnx"
    source_digest: str
    path: Path | None = None

    def describe(self) -> str:
        return f"{self.name} batch {self.batch}"


def looks_like_path(name_or_path: str) -> bool:
    return name_or_path.endswith(".onnx") or os.sep in name_or_path or os.path.isfile(name_or_path)


def check_onnx_path(path: Path, given: str) -> None:
    """Refuse an ONNX path that names no file: a directory is bad input (2), nothing there is NotFound (3)."""
    if path.is_dir():
        raise BadInput(f"{given} is a directory, not an ONNX file", "give the path of the .onnx file in it")
    if path.exists() and not path.is_file():  # a device or a FIFO: reading it never ends
        raise BadInput(f"{given} is not a regular file (a device, FIFO or socket), not an ONNX file",
                       "give the path of an .onnx file")
    if not path.is_file():
        raise NotFound(f"no such ONNX file: {given}", "check the path, or name a zoo model (see `farm models`)")


def is_onnx_model(value) -> bool:
    """Whether ``value`` is an in-memory ONNX model (an onnx.ModelProto), told without importing onnx."""
    return type(value).__name__ == "ModelProto" and type(value).__module__.startswith("onnx")


def model_key(name_or_path, batch: int, shapes: dict | None = None) -> ModelKey:
    """The key of a zoo model name, an ONNX file or an in-memory ONNX model, with ``shapes`` (named
    dimensions, or whole input shapes) fixed in the model; bad names, files and shapes raise FarmError."""
    if is_onnx_model(name_or_path) or shapes:
        check_batch(batch)
        return _stored_onnx_key(name_or_path, batch, shapes or {})
    return named_model_key(name_or_path, batch)


def named_model_key(name_or_path: str, batch: int) -> ModelKey:
    """The key of a model as a request names one, a zoo model's name or an ONNX file's path, read as it stands
    (nothing is stored: the key's path is the user's file); bad names and files raise FarmError."""
    from foundation.models.zoo import known_models, zoo_source_digest

    check_batch(batch)
    if looks_like_path(name_or_path):
        path = Path(name_or_path).expanduser()
        check_onnx_path(path, name_or_path)
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as err:
            raise path_error(err, name_or_path, doing="read") from None
        return ModelKey(path.stem, batch, "onnx", digest, path.resolve())
    if name_or_path not in known_models():
        raise BadInput(
            f"unknown model '{name_or_path}'",
            f"known models: {', '.join(known_models())}; or pass a path to an .onnx file",
        )
    return ModelKey(name_or_path, batch, "zoo", zoo_source_digest(name_or_path))


def _stored_onnx_key(model, batch: int, shapes: dict) -> ModelKey:
    """The key of an in-memory or shaped ONNX model, stored (by its digest) as the file every later step reads."""
    from onnx import external_data_helper

    from foundation.models.named_shapes import with_shapes
    from foundation.models.onnx_import import check_model_proto, read_model

    if is_onnx_model(model):
        name = stored_models.model_name(model.graph.name, "onnx-model")
        what = f"the ONNX model {name!r}"
        check_model_proto(model, what)
        if any(external_data_helper.uses_external_data(t) for t in model.graph.initializer):
            raise BadInput(f"{what} keeps its weights in external data files not loaded into it",
                           "load it with onnx.load(path), which reads them, or pass the .onnx file's path")
    elif looks_like_path(model):
        path = Path(model).expanduser()
        check_onnx_path(path, model)
        name, what = path.stem, path.name
        model, _ = read_model(path)
    else:
        raise BadInput(f"shapes apply to ONNX models; {model!r} is a zoo model, whose shapes are fixed",
                       "leave shapes out, or pass an ONNX model")
    if shapes:
        model = with_shapes(model, shapes, batch, what)
    data = model.SerializeToString()
    digest = hashlib.sha256(data).hexdigest()
    path = stored_models.stored_model(digest, name, ".onnx", lambda into: into.write_bytes(data))
    return ModelKey(name, batch, "onnx", digest, path)
