"""`farm run OUT.so`: a library `farm export` wrote, run and timed from the file and its spec, as `farm run` times."""

from __future__ import annotations

import time
from pathlib import Path

from farm.cli.output import emit_json, stdout_console
from farm.cli.run_files import checked_run_files, write_outputs
from foundation.errors import BadInput


def run_exported(path: Path, refused: list[str], *, input_path: Path | None, output_path: Path | None, runs: int,
                 warmup: int, seed: int, threads: str, json_output: bool) -> None:
    """``refused``: what was given that an exported library does not take (its spec says it)."""
    import numpy as np

    from farm.exported_model import load_exported
    from foundation.runtime.threads import parse_threads
    from foundation.units import duration, milliseconds

    if refused:
        raise BadInput(f"{', '.join(refused)} cannot be given with an exported library ({path.name})",
                       f"its target, weights and fingerprint are fixed: run `farm run {path}`")
    given = checked_run_files(runs, warmup, seed, input_path, output_path)  # before anything loads
    begin = time.perf_counter()
    model = load_exported(path, parse_threads(threads))
    loaded_s = time.perf_counter() - begin
    if given is not None:
        model.check_inputs([given])
    inputs = [given.read()] if given is not None else model.example_inputs(seed)
    first = time.perf_counter()
    outputs = model(inputs)
    first_s = time.perf_counter() - first
    if output_path:
        write_outputs(output_path, outputs)
    latency = model.library.time(inputs, runs=runs, warmup=warmup)
    spec = model.spec
    document = {
        "library": str(path),
        "model": spec.get("model"),
        "batch": spec.get("batch"),
        "sha256": spec.get("sha256"),
        "tuned_on": spec.get("tuned_on"),
        "latency_ms": latency.to_json(),
        "load_s": round(loaded_s, 4),
        "first_inference_s": round(first_s, 4),
        "threads": model.library.threads,
        "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outputs],
    }
    if json_output:
        emit_json(document)
        return
    console = stdout_console()
    console.print(f"library    {path}  ({spec.get('model')} batch {spec.get('batch')}, weights bound in, "
                  f"tuned on {spec.get('tuned_on')})")
    console.print(f"load       {duration(loaded_s)}, first inference {duration(first_s)}, "
                  f"{model.library.threads} thread{'s' if model.library.threads != 1 else ''}")
    console.print(f"latency    mean {milliseconds(latency.mean_ms)}  median {milliseconds(latency.median_ms)}  "
                  f"std {milliseconds(latency.std_ms)}  ({latency.runs} runs after {latency.warmup} warm-up)")
    for i, out in enumerate(outputs):
        console.print(f"output {i}   {out.dtype}{list(out.shape)}  mean {float(np.mean(out)):.6g}")
    if output_path:
        console.print(f"wrote      {output_path}")
