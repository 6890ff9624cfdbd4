"""Load any model the farm accepts: a zoo name, or a path to an ONNX file."""

from __future__ import annotations

from pathlib import Path

from .loaded import LoadedModel
from .onnx_import import load_onnx_model
from .zoo import ZOO, load_zoo_model


def load_model(name_or_path: str, batch: int) -> LoadedModel:
    """A zoo name, or a path to an ONNX file (anything ending .onnx, or any existing file)."""
    text = str(name_or_path)
    if text.lower().endswith(".onnx") or (text not in ZOO and Path(text).is_file()):
        return load_onnx_model(text, batch)
    return load_zoo_model(text, batch)
