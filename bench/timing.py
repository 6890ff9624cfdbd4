"""Timing several engines in one process: same input, outputs checked first, runs interleaved round-robin.

On a shared box a burst of background load lasts seconds; timing one engine after another
would hand that burst to whichever ran then. Here every round runs each engine in turn, the
order rotated per round, so a burst lands on all of them. Each engine's samples give a median
and a spread (p10/p90, IQR); ratios are taken between medians of the same run.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# An element agrees when |out - ref| <= RTOL*|ref| + ATOL_SCALE*max(1, max|ref|): float32
# reductions reordered by tuned schedules or another library's kernels differ in the last bits,
# scaled by the output's magnitude (the farm's own validation rule, a little looser for other libraries).
RTOL = 1e-3
ATOL_SCALE = 1e-3


@dataclass
class Engine:
    """One way of running the model: ``run(inputs) -> outputs``; ``sample_ms`` times one call."""

    name: str
    run: Callable[[Sequence[np.ndarray]], list[np.ndarray]]
    note: str = ""
    runs: int | None = None  # timed runs for this engine (None: the harness's default)
    set_weights: Callable[[Sequence[np.ndarray]], None] | None = None
    sample_ms: Callable[[Sequence[np.ndarray]], float] | None = None

    def time_one(self, inputs: Sequence[np.ndarray]) -> float:
        if self.sample_ms is not None:
            return self.sample_ms(inputs)
        begin = time.perf_counter()
        self.run(inputs)
        return (time.perf_counter() - begin) * 1e3


@dataclass
class Agreement:
    engine: str
    passed: bool
    max_abs: float
    worst_rel: float  # max |out - ref| / max(1, max|ref|)
    detail: str = ""


def check_outputs(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], engine: str) -> Agreement:
    """``outputs`` against ``reference`` with numpy's allclose at RTOL / ATOL_SCALE (module docstring)."""
    if len(outputs) != len(reference):
        return Agreement(engine, False, float("inf"), float("inf"),
                         f"{len(outputs)} outputs, expected {len(reference)}")
    passed, max_abs, worst = True, 0.0, 0.0
    for out, ref in zip(outputs, reference):
        out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
        if out.shape != ref.shape:
            return Agreement(engine, False, float("inf"), float("inf"), f"shape {out.shape}, expected {ref.shape}")
        scale = max(1.0, float(np.max(np.abs(ref))))
        passed &= bool(np.allclose(out, ref, rtol=RTOL, atol=ATOL_SCALE * scale))
        diff = float(np.max(np.abs(out - ref))) if out.size else 0.0
        max_abs = max(max_abs, diff)
        worst = max(worst, diff / scale)
    return Agreement(engine, passed, max_abs, worst)


@dataclass
class Samples:
    values: list[float] = field(default_factory=list)

    def summary(self) -> dict:
        v = sorted(self.values)
        if not v:
            return {"runs": 0}
        pct = np.percentile(v, [10, 25, 50, 75, 90])
        return {"runs": len(v), "median_ms": float(pct[2]), "p10_ms": float(pct[0]), "p90_ms": float(pct[4]),
                "q1_ms": float(pct[1]), "q3_ms": float(pct[3]), "iqr_ms": float(pct[3] - pct[1]),
                "mean_ms": statistics.fmean(v), "min_ms": v[0], "max_ms": v[-1]}


def interleaved(engines: Sequence[Engine], inputs: Sequence[np.ndarray], runs: int, warmup: int,
                rounds: int, progress: Callable[[str], None] = lambda _: None) -> dict[str, Samples]:
    """Warm every engine up, then time them round-robin in ``rounds`` rotated rounds."""
    for engine in engines:
        progress(f"  warm-up {engine.name} ({warmup} runs)")
        for _ in range(warmup if engine.runs is None else min(warmup, 1)):
            engine.run(inputs)
    samples = {e.name: Samples() for e in engines}
    rounds = max(1, rounds)
    for r in range(rounds):
        order = list(engines[r % len(engines):]) + list(engines[:r % len(engines)])
        for engine in order:
            total = runs if engine.runs is None else engine.runs
            count = total // rounds + (1 if r < total % rounds else 0)
            if count == 0:
                continue
            if engine.runs is None:  # slow engines (runs given) are not worth an extra call for this
                engine.run(inputs)  # the previous engine's threads may still be spinning: not a sample
            samples[engine.name].values.extend(engine.time_one(inputs) for _ in range(count))
        progress(f"  round {r + 1}/{rounds} done")
    return samples


def cpu_model() -> str:
    """The CPU the figures belong to: its model name, with its family and model, since a VM's name can
    be as generic as "AMD EPYC" for several generations."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        return f"{name} (family {fields['cpu family']} model {fields['model']})"
    return name


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
