"""What a box's hardware can do, in numbers a cost model can learn from: its device features.

A fingerprint's id says which hardware records belong to; these numbers say how fast that
hardware is (caches, vector width, a measured peak and copy bandwidth), so that a cost model
trained on records of many fingerprints can tell them apart and carry what it learned to a
fingerprint it has few records of. They are stored in the fingerprint's details under
``DEVICE_KEY``, outside its id and outside every comparison of hardware: two boxes of one
fingerprint measure slightly different peaks, and must still share their records.

The probes take under a second together; the CPU's run once per box (cached with the
fingerprint, foundation.hardware.fingerprint.cached_cpu_fingerprint). The CPU's device features
say which probes measured them (``PROBE_KEY``, foundation.domain.device_probes).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# One spelling for the domain's comparisons (which leave these numbers out) and the detection.
from foundation.domain.compatible_fingerprints import DEVICE_DETAILS as DEVICE_KEY
from foundation.domain.device_probes import PROBE_KEY, PROBE_LOAD_KEY, PROBE_VERSION

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

# Sizes of the probes: a float32 matmul large enough for the BLAS's compute-bound kernels (KVM's
# EPYC CPU model read 9.6 GFLOP/s a core at 256, 36 at 512 and at 1024: its OpenBLAS takes a slow
# path for the smaller product), and a copy several times the largest L3 of a core complex (memory
# bound). Each is timed best-of-N: a pause on a busy box lengthens one run, never shortens one (that
# box's probe read 33-66 GFLOP/s in five rounds of four matmuls, 65-70 in twenty of one). The matmul
# probe times rounds of _MATMUL_PER_ROUND matmuls on every core at once: a round is long against the
# threads' start.
_MATMUL_N = 512
_MATMUL_ROUNDS = 20
_MATMUL_PER_ROUND = 1
_COPY_BYTES = 64 * 2**20
_COPY_RUNS = 5
# The matmul probe's rounds fit in about a second: work beside it for longer (another job's worker
# processes ending) lowers every round. Where every core together reads under _SCALING_FLOOR of the
# cores times one core's reading, the probe is taken again after _PEAK_PAUSE_S, up to
# _PEAK_RETRIES times, the best kept. (The Zen 4's two cores read 1.9x one; a two-core probe
# seconds after another job read 111 GFLOP/s, 205 alone.) A box whose cores share their vector
# units (SMT siblings) reads low every time: it pays the retries and keeps its reading.
_SCALING_FLOOR = 0.6
_PEAK_RETRIES = 2
_PEAK_PAUSE_S = 2.0

_CACHE_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
_CPUINFO = Path("/proc/cpuinfo")
_CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")


def cpu_device_features(details: Mapping[str, Any]) -> dict[str, Any]:
    """This CPU's device features, from its fingerprint ``details`` (cores, caches, ISA) and two
    short probes; the peak is measured on the cores this process may use, as tuning runs."""
    features = set(details.get("features", ()))
    cores = int(details.get("cores") or 1)
    load = load_per_core()  # before the probes, whose own work would count
    device: dict[str, Any] = {
        "cores": cores,
        "vector_bits": max((bits for f, bits in _VECTOR_BITS.items() if f in features), default=64),
        "fma": int(bool(features & _FMA_FEATURES)),
        "peak_gflops": round(box_peak_gflops(cores), 2),
        "copy_gbps": round(copy_gbps(), 2),
        PROBE_KEY: PROBE_VERSION,
        PROBE_LOAD_KEY: round(load, 2),
    }
    device.update(_cache_kib())
    mhz = cpu_mhz()
    if mhz:
        device["mhz"] = mhz
    return device


def load_per_core() -> float:
    """The box's runnable processes a core, averaged over the last minute (0.0 where the OS says none)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return 0.0


def box_peak_gflops(cores: int) -> float:
    """The box's peak on ``cores`` cores: `matmul_gflops`, taken again while it reads as if other
    work held some of the cores (see _SCALING_FLOOR), the best reading kept."""
    best = matmul_gflops(cores)
    if cores < 2:
        return best
    floor = _SCALING_FLOOR * cores * matmul_gflops(1)
    for _ in range(_PEAK_RETRIES):
        if best >= floor:
            break
        time.sleep(_PEAK_PAUSE_S)
        best = max(best, matmul_gflops(cores))
    return best


def matmul_gflops(cores: int) -> float:
    """GFLOP/s of float32 matmuls (NumPy's BLAS) on ``cores`` cores at once: what the box's cores
    and vectors reach together, whatever the BLAS's own thread setting. A farm process runs its
    BLAS on one thread (farm/cli/launch.py sets OPENBLAS_NUM_THREADS=1): one matmul there reads one
    core. So each core gets a single-threaded matmul of its own, from a Python thread (NumPy
    releases the GIL in it): in this process when its BLAS runs on one thread, else in a child
    process whose BLAS does (here, BLAS's own threads would spin beside the probe's after any
    multithreaded call and take the cores it measures)."""
    if os.environ.get("OPENBLAS_NUM_THREADS") == "1":
        return concurrent_matmul_gflops(cores)
    try:
        child = subprocess.run([sys.executable, "-c", _PROBE_IN_CHILD, str(cores)], capture_output=True, text=True,
                               env={**os.environ, **_ONE_BLAS_THREAD}, timeout=_CHILD_SECONDS)
        return float(child.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):  # no interpreter to start: this process's BLAS
        return concurrent_matmul_gflops(cores)


# The child's environment and code: every BLAS NumPy may be built with, on one thread.
_ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_PROBE_IN_CHILD = ("import sys; from foundation.hardware.device_features import concurrent_matmul_gflops; "
                   "print(concurrent_matmul_gflops(int(sys.argv[1])))")
_CHILD_SECONDS = 120


def concurrent_matmul_gflops(cores: int) -> float:
    """GFLOP/s of ``cores`` float32 matmuls at once, one a Python thread, in rounds of
    _MATMUL_PER_ROUND each; a round's time runs from its first thread's start to its last one's
    end. Each reads one core where this process's BLAS runs on one thread (matmul_gflops)."""
    import numpy as np

    start = threading.Barrier(cores)
    spans: list[list[tuple[float, float]]] = [[] for _ in range(_MATMUL_ROUNDS + 1)]
    failed: list[BaseException] = []

    def matmuls(seed: int) -> None:
        try:
            a = np.random.default_rng(seed).random((_MATMUL_N, _MATMUL_N), dtype=np.float32)
            b = a.T.copy()
            for span in spans:  # the first round pays for BLAS's buffers: not counted
                start.wait()
                begin = time.perf_counter()
                for _ in range(_MATMUL_PER_ROUND):
                    a @ b
                span.append((begin, time.perf_counter()))
        except BaseException as err:  # raised below, in the caller's thread
            failed.append(err)
            start.abort()  # the other threads stop waiting for this one

    threads = [threading.Thread(target=matmuls, args=(seed,), name=f"peak-probe-{seed}") for seed in range(cores)]
    started = []
    try:
        for thread in threads:
            thread.start()  # raises where the process may start no more threads (ulimit -u)
            started.append(thread)
    except BaseException:
        start.abort()  # the threads started stop waiting for the others, and end
        raise
    finally:
        for thread in started:
            thread.join()
    if failed:
        raise next((e for e in failed if not isinstance(e, threading.BrokenBarrierError)), failed[0])
    best = min(max(end for _, end in span) - min(begin for begin, _ in span) for span in spans[1:])
    return cores * _MATMUL_PER_ROUND * 2 * _MATMUL_N**3 / max(best, 1e-9) / 1e9


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
