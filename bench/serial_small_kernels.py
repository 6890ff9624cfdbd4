"""Small kernels on one thread: a tuned model built twice from the same records, once as the farm
builds it and once with the parallel loops of its small kernels made serial, both timed in one
process, interleaved.

The profile (docs/benchmarks.md, "Lever 3") saw pools and the classifier cost 57 ms with two
threads and 9 ms with one at a load of 15-20: a parallel kernel of microseconds waits at its
barrier for a second thread the scheduler has not run. Here a kernel is small when its FLOPs
(TVM's estimate) are under --max-mflop; its `T.parallel` loops become `T.serial` (a TVMScript
round trip of the scheduled PrimFunc) before the build. Same records, same weights, same
inputs; the ratio is serial-small / as-built: below 1 the serial small kernels are faster.

    FARM_HOME=... .venv/bin/python bench/serial_small_kernels.py resnet-18 [--batch 1]
        [--max-mflop 2] [--rounds 8] [--runs 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _same_records import build_default_form, loaded_and_compared, model_and_records, print_whole_model, report_header
from prepack import load_average, spread, time_interleaved


def serial_small(mod, max_flop: float):
    """``mod`` with the parallel loops of every PrimFunc under ``max_flop`` made serial; their names."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    changed = []
    mod = mod.clone()
    for gv, func in mod.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        try:
            flop = float(estimate_tir_flops(tvm.IRModule({"main": func})))
        except Exception:
            continue
        source = func.script()
        if flop >= max_flop or "T.parallel(" not in source:
            continue
        serial = tvm.script.parser.parse(source.replace("T.parallel(", "T.serial("), extra_vars=None)
        if isinstance(serial, tvm.IRModule):
            serial = serial["main"]
        mod[gv] = serial.with_attrs(func.attrs) if func.attrs is not None else serial
        changed.append(gv.name_hint)
    return mod, changed


def build(model, target, database, max_flop: float | None) -> tuple[bytes, list[str]]:
    """The farm's build of the default form, small kernels made serial just before compiling
    when ``max_flop`` is given."""
    changed: list[str] = []

    def serial(lowered):
        if max_flop is None:
            return lowered
        lowered, names = serial_small(lowered, max_flop)
        changed.extend(names)
        return lowered

    return build_default_form(model, target, database, before_compile=serial), changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--registry", default=None, help="registry URL (default: $FARM_REGISTRY, else FARM_HOME's)")
    parser.add_argument("--max-mflop", type=float, default=2.0, help="a kernel under this many MFLOP runs serial")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5, help="runs per library per round")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    header = report_header(args.model, args.batch, max_mflop=args.max_mflop)
    model, target, database = model_and_records(args.registry, args.model, args.batch)
    as_built, _ = build(model, target, database, None)
    serial, changed = build(model, target, database, args.max_mflop * 1e6)
    print(f"serial kernels (< {args.max_mflop} MFLOP): {', '.join(changed) or 'none'}", flush=True)
    libraries, inputs, agreement = loaded_and_compared({"as-built": as_built, "serial-small": serial}, model)
    if not agreement.passed:
        raise SystemExit(f"error: the two builds disagree: {agreement.reason}")
    whole, kernels = time_interleaved(libraries, inputs, args.rounds, args.runs)
    whole_ms = {f: spread(s) for f, s in whole.items()}
    small = {f: {name: spread(kernels[f][name]) for name in changed if name in kernels[f]} for f in libraries}
    for name in changed:
        if all(name in small[f] for f in libraries):
            print(f"  {name:<44} as built {small['as-built'][name]['median']:9.1f} us, serial "
                  f"{small['serial-small'][name]['median']:9.1f} us")
    ratio = print_whole_model(whole_ms, {"as-built": "as built", "serial-small": "small kernels serial"})
    if args.json:
        args.json.write_text(json.dumps({**header, "load_after": load_average(), "serial_kernels": changed,
                                         "whole_ms": whole_ms, "small_kernels_us": small, "ratio": ratio}, indent=1))


if __name__ == "__main__":
    main()
