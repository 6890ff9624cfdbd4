"""Write a tuned model out as a file TVM's runtime alone runs: its library, weights bound in, and a spec beside it.

    OUT.so    tvm.runtime.load_module(OUT.so); relax.VirtualMachine(mod, device)["main"](*inputs)
    OUT.json  inputs and outputs (names, shapes, dtypes), target, fingerprints, TVM version, sha256

The stored library takes its weights as `main`'s parameters (foundation.compile.build_library). To make
`main` take the inputs only, the model is compiled once more with the same registry's records, and the
weights, in the form the stored library's `main` takes them (a prepacked library has rearranged them at
load), are bound into `main` as constants just before code generation (foundation.compile.weights_bound).
That costs one compile of the model (seconds for small ones) and leaves one self-contained file. The
alternatives cost more for less: a wrapper around the stored library's `main` cannot be made, since a
Relax VM cannot call a function of another VM executable; weights shipped beside the .so need code of
ours on the serving box to read them and call `main` with them. The compile is checked against the
stored library on seeded inputs before anything is written: the registry may hold newer records than
those the stored library was built with, and the export must be what `farm.load` runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from foundation.errors import BadInput, FarmError, NotFound, path_error


class LoadedForExport(Protocol):
    """What an export reads of a loaded model (farm.api.DeployedModel), named here so that this
    module, which DeployedModel.export calls, does not import it back."""

    key: Any
    model: Any
    artifact: Any
    library: Any
    fingerprint: str
    registry: Any

    def example_inputs(self, seed: int = 0) -> list: ...

EXPORT_FORMAT = "tvm-farm-export/1"
LIBRARY_SUFFIX = ".so"


@dataclass(frozen=True)
class Exported:
    """What an export wrote: the library, its spec, and the spec's document."""

    library: Path
    spec: Path
    document: dict

    def to_json(self) -> dict:
        return {**self.document, "path": str(self.library), "spec_path": str(self.spec)}


def spec_path(library: str | os.PathLike) -> Path:
    """The spec beside an exported library: OUT.so -> OUT.json."""
    return Path(library).with_suffix(".json")


def check_export_path(path) -> Path:
    """``path`` as a Path, or BadInput when a library and its spec cannot be written there."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise BadInput(f"the export path must be a file path ending in {LIBRARY_SUFFIX}, got {type(path).__name__}",
                       "e.g. model.export('mlp.so')")
    out = Path(path)
    if out.suffix != LIBRARY_SUFFIX or out.name == LIBRARY_SUFFIX:
        raise BadInput(f"the export path {out} must end in {LIBRARY_SUFFIX}", "e.g. farm export mlp-tiny llvm 1 mlp.so")
    for written in (out, spec_path(out)):
        if written.is_dir():
            raise BadInput(f"cannot write {written}: it is a directory", "choose another file name")
        if written.exists() and not written.is_file():
            raise BadInput(f"cannot write {written}: it is not a regular file (a device, FIFO or socket)",
                           "choose a path for a new file, or of one to replace")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise BadInput(f"cannot write {out}: its directory {parent} does not exist", f"create {parent} first")
    if not os.access(parent, os.W_OK):
        raise BadInput(f"cannot write {out}: {parent} is not writable", "choose another directory")
    return out


def export_library(deployed: "LoadedForExport", path, *, seed: int = 0) -> Exported:
    """Compile ``deployed`` with its weights bound in, check it against the stored library on seeded
    inputs, and write OUT.so and OUT.json, each whole or not at all."""
    out = check_export_path(path)
    library = _bound_library(deployed)
    inputs = deployed.example_inputs(seed)
    expected = deployed(inputs)
    with tempfile.TemporaryDirectory(prefix="farm-export-") as tmp:
        built = Path(tmp) / "model.so"
        built.write_bytes(library)
        outputs = _run_file(built, deployed.artifact.target, inputs)
    _check_same(deployed, outputs, expected)
    document = _spec(deployed, out.name, library, outputs)
    _write_aside(out, library, json.dumps(document, indent=2).encode() + b"\n")
    return Exported(out, spec_path(out), document)


def _bound_library(deployed: "LoadedForExport") -> bytes:
    """The deployed model's library compiled again from the registry's records, its weights bound into `main`."""
    import tvm

    from foundation.compile import build_library, weights_bound
    from foundation.domain.untuned_speed import SpeedCheck
    from foundation.domain.weights_layout import WeightsLayout
    from foundation.hardware.targets import to_tvm_target
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.models.loading import load_model
    from foundation.registry.opening import open_store
    from foundation.tvm_ir_lock import TVM_IR_LOCK

    artifact, key = deployed.artifact, deployed.key
    if key.path is not None and not key.path.is_file():
        raise NotFound(f"the model file {key.path} is gone", "export needs the model it was tuned from")
    loaded = load_model(str(key.path) if key.path else key.name, key.batch)
    form = WeightsLayout(artifact.weights_layout)
    speed = artifact.speed
    kept_untuned = speed is not None and SpeedCheck.from_json(speed).kept_untuned
    # The weights as the stored library's `main` takes them, from the host: bound as constants on any target.
    weights = [tvm.runtime.tensor(w.numpy()) for w in deployed.library.weight_arguments()]
    with TVM_IR_LOCK:
        database = None
        if not kept_untuned:  # a job that kept its untuned build stored one compiled without records
            store = open_store(deployed.registry)
            database = tvm_database_for(store, artifact.fingerprint_id, artifact.target, artifact.tvm_version,
                                        artifact.software)
        return build_library(loaded, to_tvm_target(json.loads(artifact.target)), database,
                             prepack=form.prepacks, block_activations=form.blocks_activations,
                             before_compile=weights_bound(weights))


def _run_file(path: Path, target_json: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The exported file run as a serving box would: TVM's runtime, `main` with the inputs only."""
    import tvm
    from tvm import relax

    from foundation.runtime.library_runner import device_for
    from foundation.runtime.resident_inputs import host_arrays

    device = device_for(json.loads(target_json)["kind"])
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), device)
    return host_arrays(vm["main"](*[tvm.runtime.tensor(x, device) for x in inputs]), False)


def _check_same(deployed: "LoadedForExport", outputs: list[np.ndarray], expected: list[np.ndarray]) -> None:
    validation = deployed.artifact.validation or {}
    rtol, atol = float(validation.get("rtol") or 1e-5), float(validation.get("atol") or 1e-5)
    same = len(outputs) == len(expected) and all(
        o.shape == e.shape and np.allclose(o, e, rtol=rtol, atol=atol) for o, e in zip(outputs, expected))
    if not same:
        raise FarmError(f"the library compiled with the weights bound in does not match artifact "
                        f"{deployed.artifact.id} on seeded inputs: nothing was written",
                        f"re-tune it with `farm submit {deployed.key.name} ... --retune`, then export again")


def _spec(deployed: "LoadedForExport", library_name: str, library: bytes, outputs: list[np.ndarray]) -> dict:
    from foundation.hardware.versions import tvm_version

    artifact = deployed.artifact
    target = json.loads(artifact.target)
    return {
        "format": EXPORT_FORMAT,
        "library": library_name,
        "sha256": hashlib.sha256(library).hexdigest(),
        "size": len(library),
        "model": deployed.key.name,
        "batch": deployed.key.batch,
        "inputs": [dict(spec) for spec in deployed.model.inputs],
        "outputs": [{"name": f"output{i}", "shape": list(o.shape), "dtype": str(o.dtype)}
                    for i, o in enumerate(outputs)],
        "weights": "bound",
        "weights_layout": artifact.weights_layout,
        "target": target,
        "device": "cuda" if target["kind"] == "cuda" else "cpu",  # tvm.device(...) takes it
        "fingerprint": deployed.fingerprint,
        "tuned_on": artifact.fingerprint_id,
        "tvm_version": tvm_version(),
        "artifact": artifact.id,
        "latency_ms": {"mean": artifact.latency_mean_ms, "median": artifact.latency_median_ms},
    }


def _write_aside(out: Path, library: bytes, spec: bytes) -> None:
    """Both files written beside their places and renamed into them; the library first, so that a spec
    never names a library that is not there, and the library taken back if its spec cannot follow."""
    parts: list[str] = []
    try:
        for data in (library, spec):
            part = str(out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
            # os.open, not mkstemp: the files get the mode of any new file here (0666 less the umask), not 0600.
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            parts.append(part)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        os.replace(parts[0], out)
        try:
            os.replace(parts[1], spec_path(out))
        except OSError:
            out.unlink(missing_ok=True)
            raise
    except OSError as err:
        raise path_error(err, out, doing="write") from None
    finally:
        for part in parts:
            if os.path.exists(part):
                os.unlink(part)
