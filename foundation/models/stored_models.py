"""Models given in memory (an ONNX ModelProto, a shaped ONNX model, an exported PyTorch program), kept as files.

Each is written once into the farm's data directory under its digest, `models/DIGEST/NAME.SUFFIX`,
so every later step (the build, validation, onnxruntime's reference, `farm.load`, an upload to a
coordinator) reads it as it reads a user's file, and the file's stem is the model's name.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from foundation import config
from foundation.errors import path_error

MODELS_DIR = "models"


def model_name(text: str, fallback: str) -> str:
    """A name fit for a file and a registry row: letters, digits, '-', '_' and '.'; ``fallback`` if none."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text or "").strip("-.")[:64]
    return cleaned or fallback


def stored_model(digest: str, name: str, suffix: str, write: Callable[[Path], None]) -> Path:
    """The path of the model stored under ``digest``; ``write`` makes it (into a temporary path that is
    then renamed, so a reader never sees half a file) only when it is not there yet."""
    folder = config.data_dir() / MODELS_DIR / digest
    path = folder / f"{name}{suffix}"
    if path.is_file():
        return path
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".writing-", suffix=suffix)
        os.close(handle)
        try:
            write(Path(temporary))
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    except OSError as err:
        raise path_error(err, folder, doing="store the model in") from None
    return path
