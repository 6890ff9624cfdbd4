"""`--shape NAME=SIZE` (a named dimension) or `--shape INPUT=1,128` (an input's whole shape): submit and run."""

from __future__ import annotations

from farm.cli.options import env_option
from foundation.errors import BadInput

FIX = "give --shape NAME=SIZE for a named dimension (--shape sequence=128), or INPUT=D0,D1,... for an input's shape"


def shape_option(command: str):
    return env_option(None, "--shape", command=command, metavar="NAME=SIZE",
                      help="An ONNX model's named dimension beyond the batch (sequence=128), or an input's whole "
                           "shape (input_ids=1,128); repeat for several. Part of the model's identity.")


def shaped_model(model: str, batch: int, given: list[str] | None) -> str:
    """``model``, or with shapes given the path of the ONNX model with them fixed, stored by its digest
    (foundation.models.model_key): what the rest of the command reads as the model's file."""
    if not given:
        return model
    from farm import arguments
    from foundation.models.model_key import model_key

    return str(model_key(model, batch, arguments.shapes(dict(_parsed(text) for text in given))).path)


def _parsed(text: str) -> tuple[str, int | list[int]]:
    name, equals, sizes = text.partition("=")
    if not equals or not name.strip() or not sizes.strip():
        raise BadInput(f"--shape {text!r} is not NAME=SIZE", FIX)
    try:
        values = [int(size) for size in sizes.split(",")]
    except ValueError:
        raise BadInput(f"--shape {text!r}: {sizes!r} is not a size or a list of sizes", FIX) from None
    return name.strip(), values if "," in sizes else values[0]
