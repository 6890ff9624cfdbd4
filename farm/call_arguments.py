"""A loaded model's call as engineers make it: inputs by position or by name (as onnxruntime takes them), any
DLPack-capable tensor (numpy, torch, ...) in, numpy out by default or DLPack-capable tensors on request."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from foundation.errors import BadInput

OUTPUTS = ("numpy", "dlpack")


def call_inputs(inputs: tuple, specs: Sequence[dict], model: str) -> list:
    """``model(x, y)``, ``model([x, y])`` or ``model({"x": x, "y": y})`` as arrays in the model's input order."""
    if len(inputs) == 1 and isinstance(inputs[0], Mapping):
        inputs = _by_name(inputs[0], [spec["name"] for spec in specs], model)
    elif len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = tuple(inputs[0])
    return [host_array(given, spec["name"]) for given, spec in zip(inputs, specs)] + list(inputs[len(specs):])


def host_array(given, name: str):
    """A DLPack-capable tensor on the CPU as a numpy array sharing its memory; anything else as it is (the
    shape and dtype check names what is wrong with it)."""
    if isinstance(given, np.ndarray) or not hasattr(given, "__dlpack__"):
        return given
    try:
        return np.from_dlpack(given)
    except (BufferError, RuntimeError, TypeError, ValueError) as err:
        raise BadInput(f"input {name!r} cannot be read through DLPack: {str(err).splitlines()[0] if str(err) else err}",
                       "pass a CPU tensor that needs no gradient (tensor.detach().cpu()), or a numpy array") from None


def call_outputs(outputs: list[np.ndarray], output: str, device):
    """The outputs as asked: numpy arrays, or TVM tensors on the model's device (each takes __dlpack__:
    torch.from_dlpack, np.from_dlpack, cupy ...)."""
    if output == "numpy":
        return outputs
    import tvm

    return [tvm.runtime.tensor(array, device) for array in outputs]


def check_output(output) -> str:
    if output not in OUTPUTS:
        raise BadInput(f"output must be 'numpy' or 'dlpack', got {output!r}",
                       'leave it out for numpy arrays, or pass output="dlpack" for DLPack tensors')
    return output


def _by_name(given: Mapping, names: list[str], model: str) -> tuple:
    listed = f"{model}'s inputs are {', '.join(repr(n) for n in names)}"
    unknown = [name for name in given if name not in names]
    if unknown:
        raise BadInput(f"{model} has no input named {', '.join(repr(str(n)) for n in unknown)}", listed)
    missing = [name for name in names if name not in given]
    if missing:
        raise BadInput(f"input {', '.join(repr(n) for n in missing)} of {model} is missing",
                       f"pass every input by name; {listed}")
    return tuple(given[name] for name in names)
