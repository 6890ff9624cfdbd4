"""Serve a model exported by `farm export`: TVM's runtime and numpy only, no tvm-farm on this box.

    python serve_exported.py model.so                       # random inputs of the shapes model.json gives
    python serve_exported.py model.so x.npy --output y.npz  # your inputs, one .npy per model input
"""

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import tvm
from tvm import relax


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("library", type=Path, help="the exported .so; its spec (.json) lies beside it")
    parser.add_argument("inputs", nargs="*", type=Path, help="one .npy file per model input, in order")
    parser.add_argument("--output", type=Path, help="write the outputs to this .npz (output0, output1, ...)")
    args = parser.parse_args()

    spec = json.loads(args.library.with_suffix(".json").read_text())
    if hashlib.sha256(args.library.read_bytes()).hexdigest() != spec["sha256"]:
        raise SystemExit(f"{args.library} is not the library its spec describes (sha256 differs)")
    if args.inputs:
        inputs = [np.load(path) for path in args.inputs]
    else:
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(s["shape"]).astype(s["dtype"]) for s in spec["inputs"]]

    device = tvm.device(spec["device"])
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(args.library)), device)
    result = vm["main"](*[tvm.runtime.tensor(x, device) for x in inputs])  # the inputs only: weights are inside
    outputs = [result.numpy()] if hasattr(result, "numpy") else [r.numpy() for r in result]

    for out, described in zip(outputs, spec["outputs"]):
        print(f"{described['name']}: {out.dtype}{list(out.shape)}  mean {float(out.mean()):.6g}")
    if args.output:
        np.savez(args.output, **{d["name"]: out for out, d in zip(outputs, spec["outputs"])})


if __name__ == "__main__":
    main()
