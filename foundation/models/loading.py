"""Load any model the farm accepts: a zoo name, a path to an ONNX file, or a PyTorch program the farm stored."""

from __future__ import annotations

from pathlib import Path

from .loaded import LoadedModel
from .onnx_import import load_onnx_model
from .zoo import ZOO, load_zoo_model


def load_model(name_or_path: str, batch: int) -> LoadedModel:
    """A zoo name, a stored PyTorch program (.pt2), or a path to an ONNX file (anything ending .onnx, or
    any other existing file)."""
    text = str(name_or_path)
    if text.lower().endswith(".pt2") and Path(text).is_file():
        from .torch_import import load_torch_model

        return load_torch_model(text, batch)
    if text.lower().endswith(".onnx") or (text not in ZOO and Path(text).is_file()):
        return load_onnx_model(text, batch)
    return load_zoo_model(text, batch)
