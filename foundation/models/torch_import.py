"""Import a PyTorch module as a LoadedModel: torch.export on its example inputs, then TVM's Relax importer.

torch is optional (the `torch` extra): it is imported only for a torch module, or a program the
farm stored from one. A module's identity is its exported graph (every node's shape and dtype in
it, no weight values) and the example inputs' shapes and dtypes; the program (with the weights it
was given) is stored under that digest, `models/DIGEST/NAME.pt2`, for the steps that read it later.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from pathlib import Path

from foundation.errors import BadInput, FarmError
from foundation.models import stored_models
from foundation.models.loaded import LoadedModel, TensorSpec, check_batch
from foundation.models.model_key import ModelKey

SUFFIX = ".pt2"
EXAMPLE = "e.g. farm.submit(module, 'llvm', example_inputs=(torch.randn(1, 8),))"


def torch_model_key(module, example_inputs, batch: int) -> tuple[ModelKey, object]:
    """The key of ``module`` exported on ``example_inputs`` (each a tensor whose dimension 0 is the batch),
    and the exported program; the program is stored under the key's digest."""
    import torch

    check_batch(batch)
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, Sequence) or not example_inputs:
        raise BadInput("a torch module needs example_inputs: a tuple of tensors, one per input of its forward",
                       EXAMPLE)
    for index, tensor in enumerate(example_inputs):
        if not isinstance(tensor, torch.Tensor):
            raise BadInput(f"example input {index} must be a torch.Tensor, got {type(tensor).__name__}", EXAMPLE)
        if tensor.dim() == 0 or tensor.shape[0] != batch:
            raise BadInput(f"example input {index} has shape {list(tensor.shape)}: its dimension 0 is not the "
                           f"batch ({batch})", f"give example inputs of batch {batch}, or batch=their batch")
    name = stored_models.model_name(type(module).__name__, "torch-model")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.export(module.eval(), tuple(example_inputs))
    except Exception as err:
        raise FarmError(f"torch.export could not export {name}: {type(err).__name__}: {_first_line(err)}",
                        "make the module exportable (torch.export.export(module, example_inputs) must work)") from None
    shapes = [[list(t.shape), str(t.dtype)] for t in example_inputs]
    digest = hashlib.sha256()
    digest.update(program.graph_module.print_readable(print_output=False).encode())
    digest.update(json.dumps(shapes).encode())
    key_digest = digest.hexdigest()
    path = stored_models.stored_model(key_digest, name, SUFFIX, lambda into: torch.export.save(program, str(into)))
    return ModelKey(name, batch, "torch", key_digest, path), program


def load_torch_model(path: str | Path, batch: int) -> LoadedModel:
    """A program the farm stored (torch_model_key), with the weights it was stored with."""
    import torch

    path = Path(path)
    return loaded_from_program(torch.export.load(str(path)), path.stem, path.parent.name, batch)


def loaded_from_program(program, name: str, digest: str, batch: int) -> LoadedModel:
    """The exported program in Relax, its weights lifted out as parameters after the inputs."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = from_exported_program(program, keep_params_as_input=True, unwrap_unit_return_tuple=False)
    except Exception as err:
        raise FarmError(f"TVM could not import the exported {name}: {type(err).__name__}: {_first_line(err)}",
                        "use operators TVM's torch frontend supports, or export the module to ONNX") from None
    mod, params = relax.frontend.detach_params(mod)
    values = [value.numpy() for value in params.get("main", [])]
    main_params = list(mod["main"].params)
    count = len(main_params) - len(values)

    def spec(var) -> TensorSpec:
        info = var.ty
        return TensorSpec(var.name, tuple(int(d) for d in info.shape), str(info.dtype))

    return LoadedModel(name=name, source="torch", source_digest=digest, batch=batch, mod=mod,
                       inputs=[spec(v) for v in main_params[:count]], weights=[spec(v) for v in main_params[count:]],
                       weight_values=values)


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
