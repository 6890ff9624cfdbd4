"""Name a model without building it: the key under which the registry answers hits.

A hit must cost well under a second, so the lookup key is computed without TVM: a zoo name
and its architecture version, or an ONNX file's content hash, plus the batch.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from foundation.errors import BadInput, NotFound, path_error
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


def model_key(name_or_path: str, batch: int) -> ModelKey:
    """The key of a zoo model name or an ONNX file; bad names and files raise FarmError."""
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
