"""Check a tuned library against the untuned build of the same model, and time both, interleaved."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from foundation.domain.disturbed_timing import RETIMES, disturbed, quieter
from foundation.domain.untuned_speed import (
    BLOCKS,
    WARM_ENOUGH_MS,
    SpeedCheck,
    decided,
    runs_per_block,
    speed_check,
)
from foundation.runtime.interleaved_timing import time_interleaved
from foundation.runtime.library_runner import Latency, LoadedLibrary, latency_of

# Tuned schedules reorder float32 reductions (tiling, vectorised accumulation), so bitwise
# equality is not expected. An element passes when
#   |tuned - untuned| <= ATOL_SCALE * max(1, max|untuned|) + RTOL * |untuned|
# The absolute term is scaled by the output's magnitude so that near-zero elements of a
# large-valued output are not held to a tighter bound than float32 summation can meet.
RTOL = 1e-3
ATOL_SCALE = 1e-4
# The threads are chosen from the fastest call of at least THREADS_CALLS calls spanning at least
# THREADS_WINDOW_MS on each count: three calls of a microsecond library last 15 us, which one
# time slice given to another process covers whole (the suite's mlp-tiny was stored on every
# core once that way, beside two other test workers).
THREADS_CALLS = 3
THREADS_WINDOW_MS = 20.0
# A timing taken again because its runs spread as through a burst of other work waits this
# long first, so that a burst of a few seconds can pass (foundation.domain.disturbed_timing).
RETIME_PAUSE_S = 1.0


@dataclass(frozen=True)
class ValidationResult:
    passed: bool
    max_abs_err: float | None  # None: read back from JSON where it was infinite (see to_json)
    max_rel_err: float | None
    rtol: float
    atol: float
    reason: str | None = None

    def to_json(self) -> dict:
        """As the registry keeps it. An error is infinite where an output was not finite (the check
        failed, and its reason says so); PostgreSQL's JSON holds no infinity, so it is null."""
        return {
            "passed": self.passed,
            "max_abs_err": _json_number(self.max_abs_err),
            "max_rel_err": _json_number(self.max_rel_err),
            "rtol": self.rtol,
            "atol": self.atol,
            "rule": "|tuned-untuned| <= atol + rtol*|untuned| elementwise, atol = 1e-4*max(1, max|untuned|)",
            "reason": self.reason,
        }


def _json_number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class LibraryCheck:
    """Validation of a tuned library plus the latency of it and of the untuned reference."""

    validation: ValidationResult
    latency: Latency
    untuned_latency: Latency | None
    speed: SpeedCheck | None = None  # against the untuned build, when it was timed


def compare_outputs(tuned: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> ValidationResult:
    """Elementwise comparison under the tolerance above; says why when it fails."""
    if len(tuned) != len(reference):
        return ValidationResult(False, float("inf"), float("inf"), RTOL, 0.0,
                                f"tuned library returned {len(tuned)} outputs, untuned {len(reference)}")
    max_abs = max_rel = 0.0
    atol_used = 0.0
    for i, (got, want) in enumerate(zip(tuned, reference)):
        if got.shape != want.shape:
            return ValidationResult(False, float("inf"), float("inf"), RTOL, 0.0,
                                    f"output {i} has shape {got.shape}, untuned build gives {want.shape}")
        if not np.all(np.isfinite(want)):
            return ValidationResult(False, float("inf"), float("inf"), RTOL, 0.0,
                                    f"the untuned build's output {i} is not finite: cannot validate against it")
        got64, want64 = got.astype(np.float64), want.astype(np.float64)
        atol = ATOL_SCALE * max(1.0, float(np.max(np.abs(want64))) if want64.size else 1.0)
        atol_used = max(atol_used, atol)
        diff = np.abs(got64 - want64)
        if not np.all(np.isfinite(got64)):
            return ValidationResult(False, float("inf"), float("inf"), RTOL, atol,
                                    f"tuned output {i} contains NaN or Inf")
        if diff.size:
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / np.maximum(np.abs(want64), 1e-30)).max()))
        bad = diff > atol + RTOL * np.abs(want64)
        if np.any(bad):
            where = np.unravel_index(int(np.argmax(diff - (atol + RTOL * np.abs(want64)))), diff.shape)
            return ValidationResult(
                False, max_abs, max_rel, RTOL, atol,
                f"output {i} differs from the untuned build at {tuple(int(w) for w in where)}: "
                f"{float(got64[where]):.6g} vs {float(want64[where]):.6g} "
                f"({int(bad.sum())} of {bad.size} elements outside tolerance)",
            )
    return ValidationResult(True, max_abs, max_rel, RTOL, atol_used)


def fastest_call(timed_call, calls: int = THREADS_CALLS, window_ms: float = THREADS_WINDOW_MS) -> float:
    """The fastest of ``timed_call()``'s times (ms), over at least ``calls`` calls and ``window_ms``."""
    times = [timed_call() for _ in range(calls)]
    spent = sum(times)
    while spent < window_ms:
        times.append(timed_call())
        spent += times[-1]
    return min(times)


def check_library(
    tuned_library: bytes,
    reference_library: bytes | None,
    target_kind: str,
    inputs: Sequence[np.ndarray],
    weights: Sequence[np.ndarray],
    *,
    reference_outputs: Sequence[np.ndarray] | None = None,
    runs: int = 20,
    warmup: int = 3,
    reference_runs: int = 3,
) -> LibraryCheck:
    """Run both libraries on the same inputs, compare outputs, time them.

    With the untuned library the two are timed in alternating blocks, each for at least ``runs``
    (the untuned one ``reference_runs``) and MIN_SIDE_MS in all, in fewer blocks once the verdict
    is decided (foundation.domain.untuned_speed), and the check says whether the tuned one is
    slower. The tuned library is timed on the threads `farm.load` runs it on
    (foundation.runtime.threads.timed_threads: one for a library under 1 ms on one thread that
    costs at most 1.5x its time on every core), since that is how it will run: on a busy box a
    microsecond model on every core waits at each parallel region for a descheduled thread, and
    would read slower than the untuned (serial) build for that alone.
    ``reference_outputs`` may be given instead of ``reference_library`` (the untuned outputs
    computed earlier), in which case the untuned latency is not measured.
    """
    tuned = LoadedLibrary(tuned_library, target_kind)
    tuned.set_weights(weights)
    reference = None
    if reference_outputs is None:
        if reference_library is None:
            raise ValueError("need the untuned library or its outputs to validate against")
        reference = LoadedLibrary(reference_library, target_kind)
        reference.set_weights(weights)
        reference_outputs = reference(inputs)
    validation = compare_outputs(tuned(inputs), reference_outputs)
    if reference is None:
        return LibraryCheck(validation=validation, latency=tuned.time(inputs, runs=runs, warmup=warmup),
                            untuned_latency=None)
    from foundation.hardware.fingerprint import available_cores
    from foundation.runtime.threads import SERIAL_BELOW_MS, timed_threads, use_threads

    cores = available_cores()
    mine, theirs = tuned.timer(inputs), reference.timer(inputs)
    untuned_ms = 0.0
    for _ in range(warmup):
        mine()
        if untuned_ms < WARM_ENOUGH_MS:  # a build of a second a call is warm after one
            untuned_ms = theirs()
    # A few calls on every core, and on one thread where it may be enough, choose the threads
    # (stored with the speed check: `farm.load` runs the library on them); one call of each, on
    # those threads, sizes the blocks (an untuned build of a second a call, its
    # warm-up call: it is timed once a block on any threads).
    if target_kind != "cuda":  # a GPU library's kernels do not run on the CPU's pool
        # The pool is the process's: a library loaded earlier (farm.load, auto) may have left it on
        # one thread, where a slow library's parallel regions cost little and would choose one.
        use_threads(cores)
        every_core_ms, one_thread_ms = fastest_call(mine), None
        if every_core_ms < SERIAL_BELOW_MS:
            use_threads(1)
            one_thread_ms = fastest_call(mine)
        tuned.threads = timed_threads(every_core_ms, one_thread_ms, cores)
    try:
        mine = tuned.timer(inputs)  # sets the pool to those threads
        for _ in range(warmup):
            mine()
        per_block = runs_per_block(min(mine() for _ in range(3)), runs)
        if untuned_ms < WARM_ENOUGH_MS:
            untuned_ms = theirs()
        reference_per_block = runs_per_block(untuned_ms, reference_runs)
        tuned_runs, untuned_runs = time_interleaved(mine, theirs, BLOCKS, per_block, warmup=0,
                                                    reference_runs=reference_per_block, enough=decided)
        tuned_runs = _with_runs_asked(mine, tuned_runs, per_block, runs)
        latency_runs = _undisturbed(mine, tuned_runs, per_block)
    finally:
        if target_kind != "cuda":
            use_threads(cores)  # validation and tuning keep every core
    return LibraryCheck(validation=validation, latency=latency_of(latency_runs, warmup),
                        untuned_latency=latency_of(untuned_runs, warmup),
                        speed=replace(speed_check(tuned_runs, untuned_runs), threads=tuned.threads))


def _with_runs_asked(timer, blocks: list[list[float]], per_block: int, runs: int) -> list[list[float]]:
    """``blocks`` of the tuned library's runs, with blocks of ``timer`` alone added until they hold
    the ``runs`` asked for: an interleaved timing that stopped early, its verdict decided, spares the
    untuned build's calls, not the runs the tuned library is timed for (on a slow minute a
    microsecond untuned build's blocks outlast their size and decide after four blocks)."""
    blocks = list(blocks)
    while sum(map(len, blocks)) < runs:
        blocks.append([timer() for _ in range(per_block)])
    return blocks


def _undisturbed(timer, blocks: list[list[float]], per_block: int) -> list[list[float]]:
    """The tuned library's runs to store as its latency: ``blocks`` (the interleaved timing's), or,
    where those spread as a timing through other work does, the quietest of up to RETIMES more
    timings of it alone (foundation.domain.disturbed_timing). The speed check keeps the
    interleaved runs: its verdict compares two libraries under the same load."""
    kept = blocks
    for _ in range(RETIMES):
        if not disturbed(kept):
            break
        time.sleep(RETIME_PAUSE_S)
        again, _ = time_interleaved(timer, None, max(len(blocks), 1), per_block, warmup=1)
        if quieter(again, kept):
            kept = again
    return kept
