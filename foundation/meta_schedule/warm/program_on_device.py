"""A candidate's program features read against a device: how its loops fill that device.

The raw device features (foundation.hardware.device_features) are one constant per box: with a
handful of boxes to train on, a tree splitting on them names a box rather than learns what the
box's numbers mean, and a box it never saw falls into whichever branch it resembles. These
columns are per store row instead, each a program quantity over a device quantity, so the same
meaning holds on any box: the share of the vector lanes and cores the loops fill, the reuse
distances of the accessed buffers against each cache, the arithmetic intensity against the
box's balance of peak and bandwidth, and a roofline estimate of the store's time.

They are computed from MetaSchedule's PerStoreFeature rows (164 columns, its default layout:
tvm src/s_tir/meta_schedule/feature_extractor/per_store_feature.cc) and a device vector in
VECTOR_FIELDS order. PerStoreFeature stores counts as slog(x) = log2(x + 1); they are turned
back into counts here. A device field a box lacks (NaN) makes the columns that need it NaN,
which the booster treats as missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from foundation.hardware.device_features import VECTOR_FIELDS

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

# PerStoreFeature's columns read here (buffers_per_store=5, 10 arithmetic-intensity samples).
_FLOAT_OPS = slice(0, 7)  # float mad, add/sub, mul, div/mod, cmp, math func, other func
_VECTOR_LEN, _VECTOR_PROD = 18, 17  # the innermost vectorised loop's extent; all vectorised extents
_PARALLEL_PROD = 39  # the product of the parallel loops' extents
_BUFFER0, _BUFFER_WIDTH, _BUFFERS = 57, 18, 5  # per accessed buffer, the most lines first
_BYTES, _UNIQUE_BYTES, _LINES, _REUSE_BYTES = 3, 4, 5, 11  # offsets within a buffer's columns
_INTENSITY_FIRST, _INTENSITY_LAST = 147, 156  # FLOPs per unique byte, innermost loop to whole nest
_ALLOC_BYTES = 157
PROGRAM_WIDTH = 164
# Buffers whose reuse is read against the caches: the store's first three by lines touched
# (PerStoreFeature sorts them so); the fourth and fifth are rarely present.
_REUSE_BUFFERS = 3
_CACHE_LINE = 64
_FLOAT_BYTES = 4

# bench/cost_model_transfer.py's "cross + derived device": over seven fingerprints these ranked
# about as the raw device fields did, over eleven worse (cross_model.DEVICE_FIELDS, what the farm's
# cross model reads).
COLUMNS = (
    "vector_fill", "vector_len_over_lanes", "parallel_balance", "parallel_over_cores",
    *(f"buffer{b}_reuse_over_{level}" for b in range(_REUSE_BUFFERS) for level in ("l1", "l2", "l3")),
    "alloc_over_l1", "alloc_over_l2",
    "inner_intensity_over_balance", "intensity_over_balance",
    "compute_log2_us", "memory_log2_us", "roofline_log2_us",
)

_FIELD = {name: i for i, name in enumerate(VECTOR_FIELDS)}


def program_on_device(program: "np.ndarray", vector: Sequence[float]) -> "np.ndarray":
    """``program``'s PerStoreFeature rows (stores x 164) read against the device ``vector``
    (VECTOR_FIELDS order): one row of ``COLUMNS`` per store row, float32."""
    import numpy as np

    if program.shape[1] != PROGRAM_WIDTH:
        raise ValueError(f"program features of width {program.shape[1]}, PerStoreFeature's default is {PROGRAM_WIDTH}")
    p = program.astype("float64")
    counts = lambda columns: np.exp2(np.maximum(columns, 0.0)) - 1.0  # noqa: E731  (inverse of slog)
    device = {name: float(vector[i]) for name, i in _FIELD.items()}
    cores = max(device["cores"], 1.0) if np.isfinite(device["cores"]) else np.nan
    lanes = device["vector_bits"] / (8 * _FLOAT_BYTES)
    caches = [device[f] * 1024.0 for f in ("l1d_kib", "l2_kib", "l3_kib")]
    # L3 is shared: a core's share of it is what one parallel task's reuse can count on.
    caches[2] = caches[2] / cores
    peak = device["peak_gflops"] * 1e9  # FLOP/s on every core, full vectors
    bandwidth = device["copy_gbps"] * 1e9  # bytes/s from memory

    with np.errstate(divide="ignore", invalid="ignore"):
        vector_len = counts(p[:, _VECTOR_LEN])
        vectorised = counts(p[:, _VECTOR_PROD]) > 0
        # A vectorised loop of extent n fills n of the ceil(n / lanes) * lanes lanes it issues;
        # a scalar store fills one lane of them.
        issued = np.ceil(np.maximum(vector_len, 1.0) / lanes) * lanes
        fill = np.where(vectorised, vector_len / issued, 1.0 / lanes)
        vector_ratio = np.log2(np.where(vectorised, vector_len, 1.0) / lanes)
        parallel = counts(p[:, _PARALLEL_PROD])
        # Parallel work of n tasks on c cores takes ceil(n / c) rounds; serial work uses one core.
        balance = np.where(parallel > 0, parallel / (np.ceil(np.maximum(parallel, 1.0) / cores) * cores), 1.0 / cores)
        parallel_ratio = np.log2(np.maximum(parallel, 1.0) / cores)

        reuse = []
        for b in range(_REUSE_BUFFERS):
            base = _BUFFER0 + b * _BUFFER_WIDTH
            distance = counts(p[:, base + _REUSE_BYTES])
            for cache in caches:
                # No reuse (distance 0) reads as far below every cache: it fits trivially.
                reuse.append(np.log2((distance + 1.0) / cache))
        alloc = counts(p[:, _ALLOC_BYTES])
        alloc_ratios = [np.log2((alloc + 1.0) / caches[0]), np.log2((alloc + 1.0) / caches[1])]

        machine_balance = peak / bandwidth  # FLOPs per byte at which the box turns compute bound
        intensity = [np.log2(counts(p[:, c]) / machine_balance) for c in (_INTENSITY_FIRST, _INTENSITY_LAST)]

        flops = counts(p[:, _FLOAT_OPS]) @ np.array([2.0, 1, 1, 1, 1, 1, 1])  # a mad is two
        # The store's rate: the box's peak scaled by the lanes and cores its loops fill.
        compute_s = flops / (peak * fill * balance)
        memory_bytes = np.zeros(len(p))
        for b in range(_BUFFERS):
            base = _BUFFER0 + b * _BUFFER_WIDTH
            distance = counts(p[:, base + _REUSE_BYTES])
            unique = counts(p[:, base + _UNIQUE_BYTES])
            lines = counts(p[:, base + _LINES]) * _CACHE_LINE
            # A reuse farther apart than a core's cache share misses it: every line touched comes
            # from memory again; closer, each byte comes once.
            memory_bytes += np.where(distance > caches[1], np.maximum(lines, unique), unique)
        memory_s = memory_bytes / bandwidth
        to_log_us = lambda seconds: np.log2(seconds * 1e6 + 1e-6)  # noqa: E731
        columns = [fill, vector_ratio, balance, parallel_ratio, *reuse, *alloc_ratios, *intensity,
                   to_log_us(compute_s), to_log_us(memory_s), to_log_us(np.maximum(compute_s, memory_s))]
    out = np.stack(columns, axis=1)
    out[~np.isfinite(out)] = np.nan
    return out.astype("float32")


def device_columns(program: "np.ndarray", vector: Sequence[float], names: Sequence[str]) -> "np.ndarray":
    """The columns ``names`` for each of ``program``'s rows: derived ones (``COLUMNS``) and raw
    device fields (VECTOR_FIELDS, the same on every row), in the order named."""
    import numpy as np

    unknown = [n for n in names if n not in _FIELD and n not in COLUMNS]
    if unknown:
        raise ValueError(f"unknown device column(s) {', '.join(unknown)}")
    derived = program_on_device(program, vector) if any(n in COLUMNS for n in names) else None
    out = np.empty((len(program), len(names)), dtype="float32")
    for i, name in enumerate(names):
        out[:, i] = derived[:, COLUMNS.index(name)] if name in COLUMNS else vector[_FIELD[name]]
    return out
