"""What a box's hardware can do, in numbers a cost model can learn from: its device features.

A fingerprint's id says which hardware records belong to; these numbers say how fast that
hardware is (caches, vector width, a measured peak and copy bandwidth), so that a cost model
trained on records of many fingerprints can tell them apart and carry what it learned to a
fingerprint it has few records of. They are stored in the fingerprint's details under
``DEVICE_KEY``, outside its id and outside every comparison of hardware: two boxes of one
fingerprint measure slightly different peaks, and must still share their records.

The probes take under a second together; the CPU's run once per box (cached with the
fingerprint, foundation.hardware.fingerprint.cached_cpu_fingerprint).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# One spelling for the domain's comparisons (which leave these numbers out) and the detection.
from foundation.domain.compatible_fingerprints import DEVICE_DETAILS as DEVICE_KEY

# The order of a device vector (`device_vector`): CPU and GPU fields side by side, a field the
# hardware lacks is NaN, which XGBoost treats as missing rather than as zero.
VECTOR_FIELDS = (
    "cores", "l1d_kib", "l2_kib", "l3_kib", "vector_bits", "fma", "peak_gflops", "copy_gbps", "mhz",
    "sm_count", "compute_capability", "memory_gib", "shared_memory_per_block_kib", "max_threads_per_block",
    "memory_bus_gbps",
)

# The widest vector each ISA extension gives, in bits (the largest present wins).
_VECTOR_BITS = {"avx512f": 512, "sve": 128, "avx2": 256, "avx": 256, "sse4_2": 128, "asimd": 128}
# Extensions that bring fused multiply-add (on aarch64 it is part of the base vector ISA).
_FMA_FEATURES = frozenset({"fma", "asimd", "sve", "avx512f"})

# Sizes of the probes: a float32 matmul that fits in L2 on any current CPU (compute bound), and a
# copy several times the largest L3 of a core complex (memory bound). Each is timed min-of-N:
# a pause on a busy box lengthens one run, never shortens one.
_MATMUL_N = 256
_MATMUL_RUNS = 20
_COPY_BYTES = 64 * 2**20
_COPY_RUNS = 5

_CACHE_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
_CPUINFO = Path("/proc/cpuinfo")
_CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")


def cpu_device_features(details: Mapping[str, Any]) -> dict[str, Any]:
    """This CPU's device features, from its fingerprint ``details`` (cores, caches, ISA) and two
    short probes; the probes run on the threads this process may use, as tuning does."""
    features = set(details.get("features", ()))
    device: dict[str, Any] = {
        "cores": int(details.get("cores") or 1),
        "vector_bits": max((bits for f, bits in _VECTOR_BITS.items() if f in features), default=64),
        "fma": int(bool(features & _FMA_FEATURES)),
        "peak_gflops": round(matmul_gflops(), 2),
        "copy_gbps": round(copy_gbps(), 2),
    }
    device.update(_cache_kib())
    mhz = cpu_mhz()
    if mhz:
        device["mhz"] = mhz
    return device


def matmul_gflops() -> float:
    """GFLOP/s of a float32 matmul (NumPy's BLAS): what the box's cores and vectors reach."""
    import numpy as np

    a = np.random.default_rng(0).random((_MATMUL_N, _MATMUL_N), dtype=np.float32)
    b = a.T.copy()
    a @ b  # the first call pays for BLAS's thread start
    best = _best_seconds(lambda: a @ b, _MATMUL_RUNS)
    return 2 * _MATMUL_N**3 / best / 1e9


def copy_gbps() -> float:
    """GB/s of a large array copy, bytes read plus bytes written: the box's memory bandwidth."""
    import numpy as np

    source = np.ones(_COPY_BYTES // 8, dtype=np.float64)
    destination = np.empty_like(source)
    np.copyto(destination, source)  # the first copy faults the destination's pages in
    best = _best_seconds(lambda: np.copyto(destination, source), _COPY_RUNS)
    return 2 * _COPY_BYTES / best / 1e9


def _best_seconds(run, times: int) -> float:
    best = math.inf
    for _ in range(times):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def cpu_mhz() -> int | None:
    """The CPU's maximum clock where sysfs has it, else cpu0's current one from /proc/cpuinfo
    (VMs have no cpufreq), else None."""
    text = _read(_CPUFREQ_MAX).strip()
    if text.isdigit():
        return int(text) // 1000
    match = re.search(r"^cpu MHz\s*:\s*([\d.]+)", _read(_CPUINFO), re.MULTILINE)
    return round(float(match.group(1))) if match else None


def _cache_kib() -> dict[str, int]:
    sizes = {}
    for index in sorted(_CACHE_SYSFS.glob("index*")):
        level, kind = _read(index / "level").strip(), _read(index / "type").strip()
        match = re.fullmatch(r"(\d+)\s*([KMG]?)", _read(index / "size").strip(), re.IGNORECASE)
        if not match or kind not in ("Data", "Unified") or level not in ("1", "2", "3"):
            continue
        number, unit = int(match.group(1)), match.group(2).upper()
        kib = number // 1024 if unit == "" else number * {"K": 1, "M": 1024, "G": 1024 * 1024}[unit]
        sizes["l1d_kib" if level == "1" else f"l{level}_kib"] = kib
    return sizes


def cuda_device_features(device: int = 0) -> dict[str, Any] | None:
    """CUDA device ``device``'s features as TVM's device API reports them, plus the memory bus's
    peak from the driver; None when TVM cannot open the device."""
    try:
        import tvm

        dev = tvm.cuda(device)
        if not dev.exist:
            return None
        features: dict[str, Any] = {
            "sm_count": int(dev.multi_processor_count),
            "compute_capability": float(dev.compute_version),
            "memory_gib": round(int(dev.total_global_memory) / 2**30, 2),
            "shared_memory_per_block_kib": int(dev.max_shared_memory_per_block) // 1024,
            "max_threads_per_block": int(dev.max_threads_per_block),
        }
        clock = getattr(dev, "max_clock_rate", None)
        if clock:
            features["mhz"] = int(clock) // 1000
        l2 = getattr(dev, "l2_cache_size_bytes", None)
        if l2:
            features["l2_kib"] = int(l2) // 1024
    except Exception:  # no CUDA runtime, no driver: the fingerprint goes without device features
        return None
    bus = _cuda_memory_bus_gbps(device)
    if bus:
        features["memory_bus_gbps"] = bus
    return features


def _cuda_memory_bus_gbps(device: int) -> float | None:
    """Peak DRAM bandwidth from the driver: memory clock x bus width x 2 (double data rate)."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    handle, value = ctypes.c_int(), ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(handle), device) != 0:
        return None
    # CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36 (kHz), GLOBAL_MEMORY_BUS_WIDTH = 37 (bits).
    readings = []
    for code in (36, 37):
        if cuda.cuDeviceGetAttribute(ctypes.byref(value), code, handle) != 0:
            return None
        readings.append(value.value)
    clock_khz, bus_bits = readings
    return round(2 * clock_khz * 1e3 * bus_bits / 8 / 1e9, 1)


def device_vector(details: Mapping[str, Any]) -> list[float]:
    """A fingerprint's device features in ``VECTOR_FIELDS`` order, NaN where it has none."""
    device = details.get(DEVICE_KEY) or {}
    return [_number(device.get(field)) for field in VECTOR_FIELDS]


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
