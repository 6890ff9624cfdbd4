"""The model a Python call names, as the key the registry knows it by.

A zoo name or an ONNX file's path is passed on as it is; an in-memory onnx.ModelProto, an ONNX
model with ``shapes`` for its named dimensions, and a torch.nn.Module with ``example_inputs``
are keyed here (and stored in the farm's data directory by digest: foundation.models.stored_models).
"""

from __future__ import annotations

from dataclasses import dataclass

from farm import arguments
from foundation.errors import BadInput
from foundation.models.model_key import ModelKey, model_key


@dataclass(frozen=True)
class ModelSource:
    """What a call names: ``given`` (a name or path, passed on) or ``key`` (keyed here); ``program``
    is a torch module's exported program, whose weights are the module's."""

    given: str | None
    key: ModelKey | None
    program: object = None

    @property
    def request(self) -> str | ModelKey:
        return self.key if self.key is not None else self.given

    @property
    def named(self) -> str:
        """How a hint names the model on the command line."""
        if self.key is None:
            return self.given
        return str(self.key.path) if self.key.source == "onnx" else self.key.name

    def keyed(self, batch: int) -> ModelKey:
        return self.key if self.key is not None else model_key(self.given, batch)


def model_source(model, batch: int, shapes=None, example_inputs=None) -> ModelSource:
    """``model`` checked as farm.submit and farm.load take it; bad input raises BadInput."""
    model = arguments.model_source(model)
    shapes = arguments.shapes(shapes)
    if arguments.is_torch_module(model):
        from foundation.models.torch_import import torch_model_key

        if shapes is not None:
            raise BadInput("shapes apply to ONNX models; a torch module's shapes are its example inputs'",
                           "leave shapes out and give example_inputs of the shapes to tune")
        key, program = torch_model_key(model, example_inputs, batch)
        return ModelSource(None, key, program)
    if example_inputs is not None:
        raise BadInput("example_inputs apply to a torch.nn.Module only",
                       "leave example_inputs out; name an ONNX model's dimensions with shapes=")
    if isinstance(model, str) and shapes is None:
        return ModelSource(model, None)
    return ModelSource(None, model_key(model, batch, shapes))
