"""Import a user's ONNX file as a LoadedModel: batch fixed, weights lifted out of the graph."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import numpy as np

from foundation.errors import FarmError

from .loaded import Fill, LoadedModel, TensorSpec, check_batch, default_input_fill

STATIC_SHAPES_FIX = (
    "give its size: --shape NAME=SIZE (shapes={NAME: SIZE} in Python), or export the model with static "
    "shapes for every dimension except the first (batch)"
)


def load_onnx_model(path: str | Path, batch: int) -> LoadedModel:
    check_batch(batch)
    path = Path(path)
    model, digest = read_model(path)
    graph = model.graph
    initializer_names = {init.name for init in graph.initializer}
    # Old exporters list initializers among graph inputs too; those are weights, not inputs.
    graph_inputs = [value for value in graph.input if value.name not in initializer_names]
    inputs = [input_spec(value, batch, path) for value in graph_inputs]
    inputs = [TensorSpec(s.name, s.shape, s.dtype, index_range_fill(graph, s)) for s in inputs]
    check_ops_supported(model, path)

    mod, weight_values = import_to_relax(model, inputs, path)
    main = mod["main"]
    weight_vars = list(main.params)[len(inputs) :]
    weights = [
        TensorSpec(var.name, tuple(int(d) for d in value.shape), str(value.dtype))
        for var, value in zip(weight_vars, weight_values)
    ]
    if len(weight_vars) != len(weight_values):
        raise FarmError(
            f"importing {path.name} gave {len(weight_vars)} weight parameters but "
            f"{len(weight_values)} weight values",
            "report this model to the farm's maintainers; it is an importer mismatch",
        )
    return LoadedModel(
        name=path.stem,
        source="onnx",
        source_digest=digest,
        batch=batch,
        mod=mod,
        inputs=inputs,
        weights=weights,
        weight_values=weight_values,
    )


def read_model(path: Path):
    """Parse the file into a ModelProto and hash its bytes; every failure says which file and why."""
    import onnx
    from onnx import external_data_helper

    if not path.is_file():
        raise FarmError(
            f"ONNX file not found: {path}",
            "check the path, or pass a zoo model name (see `farm models`)",
        )
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    not_onnx_fix = "pass a file written by onnx.save or torch.onnx.export; re-export it if it was truncated"
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as err:  # protobuf raises DecodeError, or RuntimeWarning-ish errors from C++
        raise FarmError(f"{path} is not a valid ONNX model: {err}", not_onnx_fix) from err
    check_model_proto(model, str(path))
    if any(external_data_helper.uses_external_data(t) for t in model.graph.initializer):
        try:
            external_data_helper.load_external_data_for_model(model, str(path.parent))
        except Exception as err:
            raise FarmError(
                f"cannot read the external weight data of {path}: {err}",
                "keep the model's external data files next to the .onnx file",
            ) from err
    return model, digest


def check_model_proto(model, what: str) -> None:
    """Refuse a ModelProto that is no model: random bytes can parse as an almost empty protobuf,
    while a real model has a graph with outputs."""
    if not model.HasField("graph") or not model.graph.output or model.ir_version < 3:
        raise FarmError(f"{what} is not a valid ONNX model (no graph or no outputs in it)",
                        "pass a model written by onnx.save or torch.onnx.export; re-export it if it was truncated")


def external_data_files(content: bytes) -> list[str]:
    """The files (as the model names them, beside it) that an ONNX model's weights are kept in;
    none for a model that holds its weights, or for bytes that are no model (read_model says so)."""
    import onnx
    from onnx import external_data_helper

    model = onnx.ModelProto()
    try:
        model.ParseFromString(content)
    except Exception:  # protobuf's DecodeError, or errors from its C++ parser
        return []
    return sorted({external_data_helper.ExternalDataInfo(tensor).location for tensor in model.graph.initializer
                   if external_data_helper.uses_external_data(tensor)})


def input_spec(value, batch: int, path: Path) -> TensorSpec:
    """The input's shape with the batch put into dimension 0; any other unknown dimension is an error."""
    from onnx import helper

    tensor_type = value.type.tensor_type if value.type.HasField("tensor_type") else None
    if tensor_type is None:
        raise FarmError(
            f"input '{value.name}' of {path.name} is not a tensor",
            "only tensor inputs are supported; export the model with plain tensor inputs",
        )
    if not tensor_type.HasField("shape"):
        raise FarmError(f"input '{value.name}' of {path.name} has no known rank", STATIC_SHAPES_FIX)
    shape = []
    for index, dim in enumerate(tensor_type.shape.dim):
        if index == 0:
            shape.append(batch)  # dynamic or fixed, the user's batch wins
        elif dim.HasField("dim_value") and dim.dim_value > 0:
            shape.append(int(dim.dim_value))
        else:
            label = f" ('{dim.dim_param}')" if dim.dim_param else ""
            raise FarmError(
                f"input '{value.name}' of {path.name} has a dynamic dimension {index}{label}; "
                "only the first (batch) dimension may be dynamic",
                STATIC_SHAPES_FIX,
            )
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)).name
    return TensorSpec(value.name, tuple(shape), dtype)


def check_ops_supported(model, path: Path) -> None:
    """Name every op TVM's importer lacks, up front, instead of its first failure deep in conversion."""
    try:
        from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map
    except ImportError:  # a private helper; if it moves, the importer's own error still applies
        return
    convert_map = _get_convert_map()
    missing = sorted(
        {
            node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            for node in model.graph.node
            if node.op_type not in convert_map and node.op_type not in ("If", "Constant")
        }
    )
    if missing:
        raise FarmError(
            f"{path.name} uses ONNX operators TVM cannot import: {', '.join(missing)}",
            "replace them with standard ONNX operators when exporting (or a newer opset), "
            "or tune a model without them",
        )


def import_to_relax(model, inputs: list[TensorSpec], path: Path):
    """Run TVM's importer with weights as parameters; return (module, weight arrays in main's order)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    try:
        with warnings.catch_warnings():
            # The importer warns about its checker, renamed inputs and the like: noise for users.
            warnings.simplefilter("ignore")
            mod = from_onnx(
                model,
                shape_dict={spec.name: list(spec.shape) for spec in inputs},
                dtype_dict={spec.name: spec.dtype for spec in inputs},
                keep_params_in_input=True,
            )
    except tvm.error.OpNotImplemented as err:
        raise FarmError(
            f"{path.name} uses ONNX operators TVM cannot import: {first_line(err)}",
            "replace them with standard ONNX operators when exporting, or tune a model without them",
        ) from err
    except Exception as err:
        raise FarmError(
            f"TVM could not import {path.name}: {type(err).__name__}: {first_line(err)}",
            "check that the model runs in onnxruntime with these input shapes; "
            f"inputs were {', '.join(f'{s.name}{list(s.shape)}' for s in inputs)}",
        ) from err
    mod, params = relax.frontend.detach_params(mod)
    return mod, [value.numpy() for value in params.get("main", [])]


def index_range_fill(graph, spec: TensorSpec) -> Fill:
    """Integer inputs that index a weight table (Gather on an initializer, e.g. token ids) get
    values below that table's size, so running the model never reads out of bounds."""
    if np.dtype(spec.dtype).kind not in "iu":
        return default_input_fill(spec)
    table_sizes = {init.name: list(init.dims) for init in graph.initializer}
    bounds = []
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == spec.name:
            dims = table_sizes.get(node.input[0])
            if dims:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                bounds.append(dims[axis])
    return Fill.randint(0, min(bounds)) if bounds else default_input_fill(spec)


def first_line(err: Exception) -> str:
    """The line of an error that says what went wrong (TVM's errors may carry a traceback first)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]
