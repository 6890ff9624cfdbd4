"""Fix an ONNX model's named (symbolic) dimensions beyond the batch: `{"sequence": 128}`, or a whole input's shape.

The sizes are written into the model itself, so the model that is hashed, stored, tuned, validated
and loaded is one static-shaped ONNX file: its digest (the model's identity) holds the shapes.
"""

from __future__ import annotations

from collections.abc import Mapping

from foundation.errors import BadInput

SHAPES_EXAMPLE = 'shapes={"sequence": 128} or shapes={"input_ids": [1, 128]}'


def with_shapes(model, shapes: Mapping[str, int | tuple[int, ...]], batch: int, what: str):
    """A copy of ``model`` whose named dimensions (a name in ``shapes`` with one size) and whole
    input shapes (an input's name with a list) are fixed; dimension 0 of an input stays the batch.
    BadInput, naming what the model has, for a name it lacks or a shape that does not fit."""
    import onnx

    shaped = onnx.ModelProto()
    shaped.CopyFrom(model)
    graph = shaped.graph
    weights = {init.name for init in graph.initializer}
    inputs = [value for value in graph.input if value.name not in weights]
    by_input = {value.name: value for value in inputs}
    batch_names = {_dims(value)[0].dim_param for value in inputs if _dims(value) and _dims(value)[0].dim_param}
    named = {dim.dim_param for value in inputs for dim in _dims(value)[1:] if dim.dim_param}
    known = f"{what}'s named dimensions: {_listed(named)}; its inputs: {_listed(by_input)}"
    sizes: dict[str, int] = {}
    for name, size in shapes.items():
        if name in by_input and not isinstance(size, int):
            _set_input_shape(by_input[name], tuple(size), batch, what)
        elif name in by_input:
            raise BadInput(f"shape of input {name!r} of {what} must list every dimension, got {size}",
                           f"e.g. {{{name!r}: {[batch] + [d.dim_value or 1 for d in _dims(by_input[name])[1:]]}}}")
        elif name in batch_names and name not in named:
            raise BadInput(f"{name!r} is {what}'s batch dimension", "give the batch as BATCH (batch=), not in shapes")
        elif name in named and isinstance(size, int):
            sizes[name] = size
        elif name in named:
            raise BadInput(f"named dimension {name!r} of {what} takes one size, got {list(size)}",
                           f"e.g. {{{name!r}: 128}}")
        else:
            raise BadInput(f"{what} has no named dimension or input {name!r}", known)
    # The same name is the same size wherever it appears: inputs past the batch, outputs, inner values.
    input_ids = {id(value) for value in inputs}
    for value in [*inputs, *graph.output, *graph.value_info]:
        for index, dim in enumerate(_dims(value)):
            if dim.dim_param in sizes and not (index == 0 and id(value) in input_ids):
                dim.dim_value = sizes[dim.dim_param]
    return shaped


def _set_input_shape(value, shape: tuple[int, ...], batch: int, what: str) -> None:
    dims = _dims(value)
    if len(shape) != len(dims):
        raise BadInput(f"input {value.name!r} of {what} has {len(dims)} dimensions, its shape gives {len(shape)}",
                       f"give one size per dimension, the batch ({batch}) first")
    if shape[0] != batch:
        raise BadInput(f"dimension 0 of input {value.name!r} is the batch ({batch}), its shape gives {shape[0]}",
                       f"start the shape with {batch}, or give batch={shape[0]}")
    for dim, size in zip(dims[1:], shape[1:]):
        dim.dim_value = size


def _dims(value):
    tensor_type = value.type.tensor_type if value.type.HasField("tensor_type") else None
    return list(tensor_type.shape.dim) if tensor_type is not None and tensor_type.HasField("shape") else []


def _listed(names) -> str:
    return ", ".join(repr(n) for n in sorted(names)) or "none"
