"""float32 exp or erf as libm's call against the farm's polynomial: a tuned model built twice from the
same records, timed in one process, interleaved.

The farm lowers float32 exp and erf on CPUs to polynomials the loops vectorise
(foundation.hardware.polynomial_exp, polynomial_erf); TVM's own lowering calls libm's scalar expf
or erff per element. Same records, weights and inputs; the first build runs with the function's
switch at 0 (FARM_POLYNOMIAL_EXP or FARM_POLYNOMIAL_ERF; the rule is registered only after it),
the second with the rule; the other function's rule is as its switch says in both. Prints the
whole model's median for both, the kernels that changed most, and how far the outputs moved. The
ratio is polynomial / libm: below 1 the polynomial is faster.

    FARM_HOME=... .venv/bin/python bench/polynomial_math.py bert [--function exp|erf] [--batch 1]
        [--registry URL] [--rounds 8] [--runs 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _same_records import build_default_form, loaded_and_compared, model_and_records, print_whole_model, report_header
from prepack import load_average, spread, time_interleaved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--function", choices=("exp", "erf"), default="exp")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--registry", default=None, help="registry URL (default: $FARM_REGISTRY, else FARM_HOME's)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5, help="runs per library per round")
    parser.add_argument("--top", type=int, default=8, help="kernels listed")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from foundation.config import POLYNOMIAL_ERF_ENV, POLYNOMIAL_EXP_ENV

    switch = {"exp": POLYNOMIAL_EXP_ENV, "erf": POLYNOMIAL_ERF_ENV}[args.function]
    os.environ[switch] = "0"  # the libm build first: a registered rule stays for the process
    header = report_header(args.model, args.batch, function=args.function)
    model, target, database = model_and_records(args.registry, args.model, args.batch)
    built = {"libm": build_default_form(model, target, database)}
    os.environ[switch] = "1"
    built["polynomial"] = build_default_form(model, target, database)
    libraries, inputs, agreement = loaded_and_compared(built, model)
    print(f"outputs: {'agree' if agreement.passed else 'DISAGREE'} (max abs err {agreement.max_abs_err:.2e})",
          flush=True)
    whole, kernels = time_interleaved(libraries, inputs, args.rounds, args.runs)
    whole_ms = {f: spread(s) for f, s in whole.items()}
    kernel_us = {f: {name: spread(samples) for name, samples in kernels[f].items()} for f in libraries}
    common = [n for n in kernel_us["libm"] if n in kernel_us["polynomial"]]
    moved = sorted(common, key=lambda n: kernel_us["polynomial"][n]["median"] - kernel_us["libm"][n]["median"])
    for name in moved[:args.top]:
        print(f"  {name:<44} libm {kernel_us['libm'][name]['median']:9.1f} us, polynomial "
              f"{kernel_us['polynomial'][name]['median']:9.1f} us")
    ratio = print_whole_model(whole_ms, {"libm": "libm", "polynomial": "polynomial"})
    if args.json:
        args.json.write_text(json.dumps({**header, "load_after": load_average(), "max_abs_err": agreement.max_abs_err,
                                         "whole_ms": whole_ms, "kernels_us": kernel_us, "ratio": ratio}, indent=1))


if __name__ == "__main__":
    main()
