"""Models to tune: the built-in zoo and user ONNX files, both loaded as a LoadedModel."""

from .loaded import LoadedModel, TensorSpec
from .loading import load_model
from .onnx_import import load_onnx_model
from .zoo import ZOO, ZooEntry, known_models, load_zoo_model

__all__ = [
    "ZOO",
    "LoadedModel",
    "TensorSpec",
    "ZooEntry",
    "known_models",
    "load_model",
    "load_onnx_model",
    "load_zoo_model",
]
