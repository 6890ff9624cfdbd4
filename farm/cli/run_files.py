"""`farm run`'s files and numbers, checked before anything runs: --input, --output, --runs and the like
(shared by the run of a stored library and of an exported one, farm.cli.run_exported)."""

from __future__ import annotations

from pathlib import Path

from foundation.domain import request_limits as limits
from foundation.errors import BadInput, FarmError, NotFound, path_error


def check_input_path(input_path: Path) -> None:
    if input_path.is_dir():
        raise BadInput(f"--input {input_path} is a directory", "pass a .npy file written by numpy.save")
    if input_path.exists() and not input_path.is_file():
        raise BadInput(f"--input {input_path} is not a regular file (a device, FIFO or socket)",
                       "pass a .npy file written by numpy.save")
    if not input_path.is_file():
        raise NotFound(f"no such input file: {input_path}", "pass a .npy file written by numpy.save")


def check_output_path(path: Path) -> None:
    """Refuse an output path that cannot be written before the run, not after it."""
    import os

    if path.suffix not in (".npy", ".npz"):
        raise BadInput(f"--output {path} must end in .npy (one output) or .npz", "e.g. --output y.npy")
    if path.is_dir():
        raise BadInput(f"--output {path} is a directory", f"give a file in it, such as {path / 'y.npy'}")
    if path.exists() and not path.is_file():  # a FIFO: writing to it waits for a reader forever
        raise BadInput(f"--output {path} is not a regular file (a device, FIFO or socket)",
                       "give a path for a new .npy file, or of one to replace")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise NotFound(f"the directory of --output {path} does not exist", f"create {parent} first")
    if not os.access(parent, os.W_OK):
        raise BadInput(f"cannot write --output {path}: {parent} is not writable", "choose another directory")


def write_outputs(path: Path, outputs) -> None:
    import numpy as np

    if path.suffix == ".npy" and len(outputs) != 1:
        raise FarmError(f"the model has {len(outputs)} outputs; a .npy file holds one", "use --output out.npz")
    try:
        if path.suffix == ".npz":
            np.savez(path, *outputs)
        else:
            np.save(path, outputs[0])
    except OSError as err:
        raise path_error(err, path, doing="write --output") from None


def check_numbers(numbers: dict) -> None:
    """Refuse a number out of its bounds (foundation.domain.request_limits), before anything is written."""
    for name, (value, bound) in numbers.items():
        limits.check_number(name, value, bound)


def checked_run_files(runs: int, warmup: int, seed: int, input_path: Path | None, output_path: Path | None):
    """`farm run`'s numbers and files checked before anything loads; the --input file opened (its header
    read, its data once it fits the model: foundation.runtime.npy_input), or None."""
    from foundation.runtime.npy_input import open_npy

    check_numbers({"--runs": (runs, limits.VALIDATION_RUNS),
                   "--warmup": (warmup, limits.WARMUP_RUNS), "--seed": (seed, limits.SEED)})
    if input_path is not None:
        check_input_path(input_path)
    if output_path is not None:
        check_output_path(output_path)
    return open_npy(input_path, f"--input {input_path}") if input_path else None
