"""A candidate's program features read against a device: the same loops fill boxes differently."""

from __future__ import annotations

import math

import numpy as np
import pytest

from foundation.hardware.device_features import VECTOR_FIELDS, device_vector
from foundation.meta_schedule.warm.program_on_device import COLUMNS, PROGRAM_WIDTH, program_on_device

AVX2 = {"cores": 2, "l1d_kib": 32, "l2_kib": 512, "l3_kib": 32768, "vector_bits": 256, "fma": 1,
        "peak_gflops": 90.0, "copy_gbps": 16.0, "mhz": 2400}
AVX512 = {**AVX2, "cores": 4, "l1d_kib": 48, "l2_kib": 2048, "vector_bits": 512, "peak_gflops": 180.0}


def _slog(x: float) -> float:
    return math.log2(x + 1)


def _store(*, mads=0, vector_len=0, parallel=0, reuse_bytes=0, alloc_bytes=0, unique_bytes=0, lines=0):
    """One PerStoreFeature row with the counts given (slog-scaled, as TVM writes them)."""
    row = np.zeros(PROGRAM_WIDTH, dtype="float32")
    row[0] = _slog(mads)
    row[16], row[17], row[18] = (_slog(1), _slog(vector_len), _slog(vector_len)) if vector_len else (0, 0, 0)
    row[38], row[39] = (_slog(1), _slog(parallel)) if parallel else (0, 0)
    row[57 + 4], row[57 + 5], row[57 + 11] = _slog(unique_bytes), _slog(lines), _slog(reuse_bytes)
    row[157] = _slog(alloc_bytes)
    return row


def _column(rows, device, name):
    return program_on_device(np.stack(rows), device_vector({"device": device}))[:, COLUMNS.index(name)]


def test_an_eight_lane_loop_fills_an_avx2_box_and_half_an_avx512_one():
    rows = [_store(vector_len=8), _store(vector_len=12), _store()]
    np.testing.assert_allclose(_column(rows, AVX2, "vector_fill"), [1.0, 12 / 16, 1 / 8], rtol=1e-5)
    np.testing.assert_allclose(_column(rows, AVX512, "vector_fill"), [0.5, 12 / 16, 1 / 16], rtol=1e-5)


def test_parallel_tasks_are_balanced_by_the_boxs_cores():
    rows = [_store(parallel=3), _store(parallel=8), _store()]
    np.testing.assert_allclose(_column(rows, AVX2, "parallel_balance"), [0.75, 1.0, 0.5], rtol=1e-5)
    np.testing.assert_allclose(_column(rows, AVX512, "parallel_balance"), [0.75, 1.0, 0.25], rtol=1e-5)


def test_a_reuse_distance_is_read_against_each_cache_of_the_box():
    rows = [_store(reuse_bytes=40 * 1024 - 1)]
    # 40 KiB between reuses: over a 32 KiB L1, within a 48 KiB one.
    assert _column(rows, AVX2, "buffer0_reuse_over_l1")[0] > 0 > _column(rows, AVX512, "buffer0_reuse_over_l1")[0]
    assert _column(rows, AVX2, "buffer0_reuse_over_l2")[0] == pytest.approx(math.log2(40 / 512), abs=1e-4)
    # The L3 is shared: a core's share of it is what counts.
    assert _column(rows, AVX2, "buffer0_reuse_over_l3")[0] == pytest.approx(math.log2(40 / (32768 / 2)), abs=1e-4)


def test_the_roofline_estimate_is_compute_on_a_slow_core_and_memory_on_a_slow_bus():
    row = _store(mads=1e9, vector_len=8, parallel=2, unique_bytes=4e6, lines=1)
    compute = 2e9 / 90e9  # two FLOPs a mad, full lanes and cores
    assert 2 ** _column([row], AVX2, "compute_log2_us")[0] == pytest.approx(compute * 1e6, rel=1e-3)
    assert 2 ** _column([row], AVX2, "memory_log2_us")[0] == pytest.approx(4e6 / 16e9 * 1e6, rel=1e-3)
    assert _column([row], AVX2, "roofline_log2_us")[0] == _column([row], AVX2, "compute_log2_us")[0]
    starved = {**AVX2, "copy_gbps": 0.1}
    assert _column([row], starved, "roofline_log2_us")[0] == _column([row], starved, "memory_log2_us")[0]


def test_a_device_without_features_gives_missing_values_and_a_wrong_width_is_refused():
    out = program_on_device(np.stack([_store(vector_len=8)]), [math.nan] * len(VECTOR_FIELDS))
    assert out.shape == (1, len(COLUMNS)) and np.isnan(out).all()
    with pytest.raises(ValueError, match="width 172"):
        program_on_device(np.zeros((1, 172), dtype="float32"), device_vector({"device": AVX2}))
