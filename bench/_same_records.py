"""A tuned model built two ways from one registry's records, both loaded in one process: the set-up of
bench/serial_small_kernels.py and bench/polynomial_math.py, which then time the two interleaved."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

from prepack import cpu_name, load_average

TARGET = "llvm"


def report_header(model: str, batch: int, **extra) -> dict:
    """The command, CPU, date, load and TVM's threads (as the farm sets them) a report starts
    with; printed as one line."""
    from foundation.hardware.tvm_startup import pin_tvm_threads

    pin_tvm_threads()
    header = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "cpu": cpu_name(),
              "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "load_before": load_average(), "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"),
              "model": model, "batch": batch, **extra}
    print(f"{header['cpu']}, {header['cores']} CPUs, {header['date']}, load {header['load_before']}, "
          f"TVM_NUM_THREADS={header['tvm_num_threads']}", flush=True)
    return header


def model_and_records(registry: str | None, model_name: str, batch: int):
    """The model, this box's TVM target and the registry's records for it, as a MetaSchedule database."""
    from farm.session import open_context
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics(TARGET)
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.models.loading import load_model

    ctx = open_context(registry, TARGET)
    database = tvm_database_for(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, ctx.software)
    return load_model(model_name, batch), ctx.tvm_target(), database


def build_default_form(model, target, database, before_compile=None) -> bytes:
    """The library a job builds from these records: the CPU's default form (`auto`'s)."""
    from foundation.compile import build_library
    from foundation.domain.weights_layout import weights_layout_for

    form = weights_layout_for("auto", TARGET)
    return build_library(model, target, database, prepack=form.prepacks, block_activations=form.blocks_activations,
                         before_compile=before_compile)


def loaded_and_compared(built: dict[str, bytes], model):
    """Each build loaded with the model's seed-0 weights; the inputs; how the other builds' outputs
    compare with the first's (foundation.runtime.validation): the first that disagrees, else the
    one furthest from it."""
    from foundation.runtime.library_runner import LoadedLibrary
    from foundation.runtime.validation import compare_outputs

    weights, inputs = model.make_weights(0), model.make_inputs(0)
    libraries = {}
    for form, library in built.items():
        libraries[form] = LoadedLibrary(library, TARGET)
        libraries[form].set_weights(weights)
    first, *others = libraries.values()
    reference = first(inputs)
    agreements = [compare_outputs(other(inputs), reference) for other in others]
    furthest = min(agreements, key=lambda a: (a.passed, -(a.max_abs_err if a.max_abs_err is not None else math.inf)))
    return libraries, inputs, furthest


def print_whole_model(whole_ms: dict[str, dict], labels: dict[str, str]) -> float:
    """Prints both builds' whole-model medians (p10, p90) on one line; returns second / first."""
    (first, _), (second, _) = labels.items()
    ratio = whole_ms[second]["median"] / whole_ms[first]["median"]
    sides = ", ".join(f"{label} {whole_ms[form]['median']:.2f} ms (p10 {whole_ms[form]['p10']:.2f}, "
                      f"p90 {whole_ms[form]['p90']:.2f})" for form, label in labels.items())
    print(f"whole model: {sides}: ratio {ratio:.3f}; load at the end {load_average()}")
    return ratio
