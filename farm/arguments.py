"""The Python API's arguments checked as `farm` checks its options: a FarmError in one line, before anything is written.

A submit's values are checked by foundation.domain.submission.asked_submission, as `farm submit`'s
and a coordinator's callers' are; numbers go through the bounds all of them use
(foundation.domain.request_limits). This module checks what only Python can be given: a model as
an object, a target as a dict, paths, seconds, and values of the wrong type (None, a dict, a float
where a count belongs, True for a number). What a well-typed value means (a known model, a target)
is judged where it is used, for the CLI and the API alike.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping

from foundation.domain import request_limits as limits
from foundation.errors import BadInput

# One dimension's size in shapes: a sequence of a million tokens is already far past any model tuned here.
DIMENSION = limits.Bound(1, 1 << 20)


def model_source(value):
    """A zoo model's name, an ONNX file's path, an in-memory onnx.ModelProto, or a torch.nn.Module."""
    from foundation.models.model_key import is_onnx_model

    if is_onnx_model(value) or is_torch_module(value):
        return value
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise BadInput(f"model must be a zoo model's name or an ONNX file's path, got {limits.shown_value(value)}",
                       "or an onnx.ModelProto, or a torch.nn.Module with example_inputs; "
                       "e.g. farm.submit('resnet-18', 'llvm', 1)")
    limits.check_text("model", value, limits.MAX_TEXT_LENGTH)
    return value


def is_torch_module(value) -> bool:
    """Whether ``value`` is a torch.nn.Module; torch is never imported for it (no module of it exists unless it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def shapes(value) -> dict[str, int | tuple[int, ...]] | None:
    """Sizes of an ONNX model's named dimensions beyond the batch ({"sequence": 128}) or whole input shapes
    ({"input_ids": [1, 128]}); None: none given."""
    if value is None:
        return None
    example = 'e.g. shapes={"sequence": 128} or shapes={"input_ids": [1, 128]}'
    if not isinstance(value, Mapping) or not value:
        raise BadInput(f"shapes must map named dimensions or inputs to sizes, got {limits.shown_value(value)}", example)
    checked: dict[str, int | tuple[int, ...]] = {}
    for name, size in value.items():
        if not isinstance(name, str) or not name:
            raise BadInput(f"shapes' keys must be dimension or input names, got {limits.shown_value(name)}", example)
        sizes = [size] if isinstance(size, int) and not isinstance(size, bool) else size
        if isinstance(sizes, (str, bytes, Mapping)) or not isinstance(sizes, (list, tuple)) or not sizes:
            raise BadInput(f"shape of {name!r} must be a size or a list of sizes, got {limits.shown_value(size)}",
                           example)
        for one in sizes:
            limits.check_number(f"shape of {name!r}", one, DIMENSION, f"give sizes from 1 to {DIMENSION.high:,}")
        checked[name] = size if isinstance(size, int) else tuple(size)
    return checked


def target_text(value) -> str:
    """llvm, cuda, or a TVM target as its JSON text or a dict (the JSON object `farm` takes)."""
    if isinstance(value, Mapping):
        try:
            value = json.dumps(value)
        except (TypeError, ValueError) as err:
            raise BadInput(f"target is not a JSON object: {err}",
                           'give a dict of JSON values, e.g. {"kind": "llvm", "num-cores": 2}') from None
        except RecursionError:  # as the target's text is refused (foundation.hardware.targets)
            raise BadInput("target is not a JSON object the farm reads (nested too deeply)",
                           'give a TVM target, e.g. {"kind": "llvm", "num-cores": 2}') from None
    if not isinstance(value, str) or not value:
        raise BadInput("target must be llvm, cuda or a TVM target (its JSON text or a dict), "
                       f"got {limits.shown_value(value)}", "e.g. farm.submit('resnet-18', 'llvm', 1)")
    limits.check_text("target", value, limits.MAX_TEXT_LENGTH)
    return value


def optional_text(name: str, value, example: str, limit: int = limits.MAX_ID_LENGTH) -> str | None:
    """A string argument that may be left out (None); a path is taken as its string."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    limits.check_optional_text(name, value, limit, example)
    return value


def flag(name: str, value) -> bool:
    """A yes/no argument: True or False, not a string that merely looks like one ("no" is true)."""
    limits.check_flag(name, value)
    return value


def seconds(name: str, value) -> float | None:
    """A duration in seconds, 0 or more, that may be left out (None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise BadInput(f"{name} must be a number of seconds, 0 or more, got {limits.shown_value(value)}",
                       f"e.g. {name}=600, or leave it out")
    return float(value)
