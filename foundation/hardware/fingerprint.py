"""This box's hardware fingerprint: the key under which its tuning records are shared."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation.domain.device_probes import probe_again
from foundation.errors import FarmError
from foundation.hardware.device_features import DEVICE_KEY, cpu_device_features, cuda_device_features, load_per_core
from foundation.hardware.isa_features import CODEGEN_FEATURES, features_llvm_gives

# Bump when detection or canonicalization changes what goes into an id: cached fingerprints
# computed by older code are then recomputed instead of being trusted.
SCHEMA_VERSION = 1

KINDS = ("cpu", "cuda")


# Other spellings of the same extension (LLVM, other kernels, agents on other OSes).
FEATURE_ALIASES = {"avx512vnni": "avx512_vnni", "avxvnni": "avx_vnni", "neon": "asimd", "dotprod": "asimddp"}

# Features implied by a stronger one: left out of the human summary to keep it one line.
_IMPLIED_IN_SUMMARY = {
    "avx2": {"sse4_2", "avx", "fma", "f16c"},
    "avx512f": {"avx2", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
    "sve2": {"sve"},
}

# aarch64 kernels report a vendor number, not a name (MIDR implementer field).
ARM_IMPLEMENTERS = {
    "0x41": "ARM", "0x42": "Broadcom", "0x43": "Cavium", "0x46": "Fujitsu", "0x48": "HiSilicon",
    "0x4e": "NVIDIA", "0x50": "APM", "0x51": "Qualcomm", "0x61": "Apple", "0x6d": "Microsoft",
    "0xc0": "Ampere",
}

_REQUIRED = {
    "cpu": ("arch", "vendor", "model", "features", "cores", "llvm_mcpu", "llvm_triple"),
    "cuda": ("name", "compute_capability", "sm_count", "memory_gib"),
}
_INT_FIELDS = {
    "cores", "l2_kib", "l3_kib", "x86_family", "x86_model", "sve_vector_bytes", "sm_count", "memory_gib",
}
# What a box can report: cores become a target's num-cores (which takes 1 to 4,096), the others
# are sizes and model numbers. A value beyond these is no hardware's, and a key of its own.
_INT_BOUNDS = {"cores": (1, 4096)}
_INT_DEFAULT_BOUNDS = (0, 2**31 - 1)

# LLVM's name of an older CPU of this box's architecture (haswell on an AVX-512 Xeon): the box then
# stands for that CPU, its fingerprint keeping only the ISA features LLVM gives it and its targets
# compiling for it, so that one box records a second code-generation level as its own fingerprint
# (bench/cost_model_dataset.py). Unset: the box as it is.
CPU_VIEW_ENV = "FARM_CPU_VIEW_MCPU"

_CPUINFO = Path("/proc/cpuinfo")
_CACHE_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class Fingerprint:
    """What a box's tuning results depend on, and the short id they are stored under."""

    id: str
    kind: str
    summary: str
    details: dict

    def to_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "summary": self.summary, "details": dict(self.details)}

    @staticmethod
    def from_json(d: dict) -> "Fingerprint":
        # The stored id is trusted, not recomputed: rows written before a SCHEMA_VERSION change
        # must still load and keep naming the records they key.
        return Fingerprint(id=d["id"], kind=d["kind"], summary=d["summary"], details=dict(d["details"]))


# --------------------------------------------------------------------------- canonical form


def fingerprint_from_details(kind: str, details: dict) -> Fingerprint:
    """Canonicalize reported details and derive the id; equal hardware gives an equal id.

    Known fields are normalized (spelling, types, feature subset); unknown fields are kept
    as JSON so that an agent newer than the coordinator still gets a distinct, stable id.
    """
    if kind not in KINDS:
        raise FarmError(f"unknown fingerprint kind {kind!r}", f"use one of {', '.join(KINDS)}")
    missing = [f for f in _REQUIRED[kind] if details.get(f) in (None, "")]
    if missing:
        raise FarmError(f"{kind} fingerprint details lack {', '.join(missing)}",
                        "report every field the agent's detection produces")
    canonical = {key: _canonical_field(key, value) for key, value in details.items() if value is not None}
    canonical = dict(sorted(canonical.items()))
    # Device features are measurements, not identity: boxes of one hardware differ in them a little.
    identity = {key: value for key, value in canonical.items() if key != DEVICE_KEY}
    digest = hashlib.sha256(_canonical_json({"kind": kind, "details": identity}).encode()).hexdigest()
    summary = _cpu_summary(canonical) if kind == "cpu" else _cuda_summary(canonical)
    return Fingerprint(id=f"{kind}-{digest[:12]}", kind=kind, summary=summary, details=canonical)


def _canonical_field(key: str, value: Any) -> Any:
    try:
        _refuse_nul(key, value)
        if key == "features":
            names = {FEATURE_ALIASES.get(str(f).strip().lower(), str(f).strip().lower()) for f in value}
            return sorted(names & CODEGEN_FEATURES)
        if key == "compute_capability":
            return _compute_capability(value)
        if key in _INT_FIELDS:
            number = int(value)
            low, high = _INT_BOUNDS.get(key, _INT_DEFAULT_BOUNDS)
            if not low <= number <= high:
                raise ValueError(f"expected {low:,} to {high:,}")
            return number
        if isinstance(value, str):
            return " ".join(value.split())
        return json.loads(_canonical_json(value))
    except (TypeError, ValueError, OverflowError, RecursionError) as err:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:80] + "…"
        raise FarmError(f"fingerprint field {key}={shown} is malformed ({err})",
                        "report JSON values as the agent's detection produces them") from None


def _refuse_nul(key: str, value: Any) -> None:
    """No NUL in any text of the details: PostgreSQL's JSON holds none, so a registration
    carrying one failed as if the registry were down."""
    texts = [key]
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict):
            texts.extend(str(k) for k in item)
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    if any("\x00" in text for text in texts):
        raise ValueError("it holds a NUL character")


def _compute_capability(value: Any) -> str:
    """'8.0' whether reported as '8.0', 8.0, (8, 0), '80' or 'sm_80'."""
    if isinstance(value, (tuple, list)):
        major, minor = value
        return f"{int(major)}.{int(minor)}"
    text = str(value).strip().lower().removeprefix("sm_")
    if "." in text:
        major, minor = text.split(".", 1)
        return f"{int(major)}.{int(minor)}"
    if text.isdigit() and len(text) >= 2:
        return f"{int(text[:-1])}.{int(text[-1])}"
    raise ValueError("expected major.minor")


def _canonical_json(value: Any) -> str:
    # No NaN or infinity: standard JSON has neither, and PostgreSQL refuses both.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _cpu_summary(d: dict) -> str:
    features = set(d.get("features", []))
    shown = features - set().union(*(_IMPLIED_IN_SUMMARY.get(f, set()) for f in features))
    feature_text = "+".join(sorted(shown)) or "no SIMD extensions"
    return (f"{d['model']} {d['arch']}, {d['cores']} cores, {feature_text}, "
            f"llvm mcpu={d['llvm_mcpu']}")


def _cuda_summary(d: dict) -> str:
    cc = d["compute_capability"].replace(".", "")
    return f"{d['name']}, sm_{cc}, {d['sm_count']} SMs, {d['memory_gib']} GiB"


# --------------------------------------------------------------------------- CPU detection


def cpu_fingerprint() -> Fingerprint:
    """Detect this CPU (imports TVM for LLVM's view of it: ~0.5 s; see cached_cpu_fingerprint)."""
    cheap = _cheap_cpu_details()
    llvm = _llvm_cpu_details(cheap["features"])
    return fingerprint_from_details("cpu", {**cheap, **llvm, DEVICE_KEY: _cpu_device({**cheap, **llvm})})


def cached_cpu_fingerprint(cache_dir: Path) -> Fingerprint:
    """The CPU fingerprint without importing TVM when nothing it depends on has changed.

    Only LLVM's mcpu/triple need TVM, and the device features a second of probes: both are
    cached; everything else is read from /proc and /sys each call
    (cheap), and together with the TVM version forms the cache key. A cache file that is
    missing, unreadable or written by other code is simply recomputed.
    """
    from foundation.hardware.versions import tvm_version

    cheap = _cheap_cpu_details()
    key = hashlib.sha256(
        _canonical_json({"schema": SCHEMA_VERSION, "cpu": cheap, "tvm": tvm_version(),
                         "view": os.environ.get(CPU_VIEW_ENV, "").strip()}).encode()
    ).hexdigest()
    # The key is in the name, so boxes sharing a home directory (NFS) do not evict each other.
    path = Path(cache_dir) / f"cpu-fingerprint-{key[:16]}.json"
    try:
        stored = json.loads(path.read_text())
        # Device features of older probes, or probed on a busy box, are measured again (the latter once
        # the box is quiet); the id does not change (they are outside it).
        if (stored.get("key") == key and isinstance(stored.get(DEVICE_KEY), dict)
                and not probe_again(stored[DEVICE_KEY], load_per_core())):
            return fingerprint_from_details("cpu", {**cheap, **stored["llvm"], DEVICE_KEY: stored[DEVICE_KEY]})
    except (OSError, ValueError, KeyError, TypeError, AttributeError, FarmError):
        pass
    llvm = _llvm_cpu_details(cheap["features"])
    # Measured once per box and view (the key holds the cores this process may use, and CPU_VIEW_ENV).
    device = _cpu_device({**cheap, **llvm})
    fingerprint = fingerprint_from_details("cpu", {**cheap, **llvm, DEVICE_KEY: device})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "llvm": llvm, DEVICE_KEY: device,
                                   "fingerprint": fingerprint.to_json()}, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs the TVM import on the next call
    return fingerprint


# Device features measured by this process, by the cheap details they were measured under.
_MEASURED_DEVICES: dict[str, dict] = {}


def _cpu_device(cheap: dict) -> dict:
    """This CPU's device features, probed once per process and view: two probes differ a little,
    and one process must see one fingerprint (across processes the cache file keeps them)."""
    key = _canonical_json(cheap)
    if key not in _MEASURED_DEVICES:
        _MEASURED_DEVICES[key] = cpu_device_features(cheap)
    return dict(_MEASURED_DEVICES[key])


def _llvm_cpu_details(features: list[str]) -> dict:
    """How TVM's bundled LLVM names this CPU: what an `llvm` target without mcpu compiles for; under
    CPU_VIEW_ENV, the CPU it names, with the ISA ``features`` (this CPU's) that one has."""
    from tvm.target import codegen

    details = {"llvm_mcpu": str(codegen.llvm_get_system_cpu()), "llvm_triple": str(codegen.llvm_get_system_triple())}
    view = os.environ.get(CPU_VIEW_ENV, "").strip()
    if not view:
        return details
    from tvm.target import Target

    triple = details["llvm_triple"]
    if not codegen.llvm_is_valid_cpu(view, triple):
        raise FarmError(f"{CPU_VIEW_ENV}={view}: LLVM does not know that CPU for {triple}",
                        f"unset {CPU_VIEW_ENV}, or name a CPU LLVM knows, such as haswell")
    wanted = features_llvm_gives(Target({"kind": "llvm", "mtriple": triple, "mcpu": view}))
    missing = sorted(wanted - set(features))
    if missing:
        raise FarmError(f"{CPU_VIEW_ENV}={view}: this CPU lacks {', '.join(missing)}, which code for {view} uses",
                        f"unset {CPU_VIEW_ENV}, or name an older CPU than this one")
    return {**details, "llvm_mcpu": view, "features": sorted(wanted & set(features))}


def _cheap_cpu_details() -> dict:
    """Everything of the CPU fingerprint that needs no TVM."""
    arch = platform.machine().lower()
    info = _first_processor(_read(_CPUINFO))
    details: dict[str, Any] = {"arch": arch, "cores": available_cores(), **_cache_sizes()}
    flags = (info.get("flags") or info.get("features") or "").split()
    details["features"] = sorted({FEATURE_ALIASES.get(f, f) for f in flags} & CODEGEN_FEATURES)
    if "cpu implementer" in info:
        implementer = info["cpu implementer"].lower()
        part = info.get("cpu part", "unknown").lower()
        details["vendor"] = ARM_IMPLEMENTERS.get(implementer, implementer)
        details["model"] = f"{details['vendor']} part {part}"
        # SVE code is compiled for the vector length (128-bit on Grace, 256-bit on Graviton3).
        sve_bytes = _read(Path("/proc/sys/abi/sve_default_vector_length")).strip()
        if "sve" in details["features"] and sve_bytes.isdigit():
            details["sve_vector_bytes"] = int(sve_bytes)
    else:
        details["vendor"] = info.get("vendor_id") or platform.processor() or "unknown"
        details["model"] = info.get("model name") or platform.processor() or arch
        # VMs often show a generic model name ("AMD EPYC"); family/model numbers still tell
        # Zen 4 from Zen 5 apart. Stepping is left out: it does not change code or speed.
        for field, key in (("cpu family", "x86_family"), ("model", "x86_model")):
            if info.get(field, "").isdigit():
                details[key] = int(info[field])
    return details


def _first_processor(text: str) -> dict[str, str]:
    """The first block of /proc/cpuinfo as lower-cased key -> value (cpu0 describes the box)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    return fields


def available_cores() -> int:
    """CPUs this process may run on: its affinity, capped by a cgroup CPU quota.

    In a container started with `--cpus=2` on a 64-core host the affinity still lists 64 CPUs;
    TVM would spawn 64 threads and be throttled, so the quota is what tuning results reflect.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def _cgroup_cpu_quota() -> float | None:
    """The tightest CPU quota (in CPUs) of this process's cgroup and its ancestors, if any."""
    quotas = []
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            candidates = [Path("/sys/fs/cgroup") / p / "cpu.max" for p in _ancestors(path)]
            for file in candidates:
                parts = _read(file).split()
                if len(parts) == 2 and parts[0] != "max":
                    quotas.append(int(parts[0]) / int(parts[1]))
        elif "cpu" in controllers.split(","):
            for p in _ancestors(path):
                base = Path("/sys/fs/cgroup/cpu") / p
                quota, period = _read(base / "cpu.cfs_quota_us").strip(), _read(base / "cpu.cfs_period_us").strip()
                if quota.isdigit() and period.isdigit() and int(period) > 0:
                    quotas.append(int(quota) / int(period))
    return min(quotas) if quotas else None


def _ancestors(cgroup_path: str) -> list[str]:
    parts = [p for p in cgroup_path.strip().split("/") if p]
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def _cache_sizes() -> dict:
    """L2/L3 sizes of cpu0 in KiB (absent on some VMs and ARM boards: then left out)."""
    sizes = {}
    for index in sorted(_CACHE_SYSFS.glob("index*")):
        level = _read(index / "level").strip()
        kind = _read(index / "type").strip()
        size = _parse_size_kib(_read(index / "size").strip())
        if level in ("2", "3") and kind in ("Unified", "Data") and size:
            sizes[f"l{level}_kib"] = size
    return sizes


def _parse_size_kib(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)\s*([KMG]?)", text, re.IGNORECASE)
    if not match:
        return None
    number, unit = int(match.group(1)), match.group(2).upper()
    return number // 1024 if unit == "" else number * {"K": 1, "M": 1024, "G": 1024 * 1024}[unit]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


# --------------------------------------------------------------------------- CUDA detection


def cuda_fingerprint(device: int = 0) -> Fingerprint:
    """Detect CUDA device ``device`` as CUDA numbers it (after CUDA_VISIBLE_DEVICES)."""
    details = _cuda_details_from_tvm(device) or _cuda_details_from_driver(device)
    if details is None:
        seen = _nvidia_smi_names()
        if seen:
            raise FarmError(
                f"CUDA device {device} cannot be queried ({len(seen)} GPU(s) listed by nvidia-smi: "
                f"{', '.join(seen)})",
                "check CUDA_VISIBLE_DEVICES and that the NVIDIA driver supports the CUDA version "
                "TVM was built with (`farm fingerprint --json` lists it)",
            )
        raise FarmError(f"no CUDA device {device} on this machine",
                        "tune for llvm here, or run the agent on a box with an NVIDIA GPU and driver")
    details["host_triple"] = _host_triple()
    device_features = cuda_device_features(device)
    if device_features:
        details[DEVICE_KEY] = device_features
    return fingerprint_from_details("cuda", details)


def fingerprint_for(target_kind: str, device: int = 0) -> Fingerprint:
    """The fingerprint that keys records of a target kind ("llvm" -> CPU, "cuda" -> GPU)."""
    if target_kind == "llvm":
        return cpu_fingerprint()
    if target_kind == "cuda":
        return cuda_fingerprint(device)
    raise FarmError(f"no fingerprint for target kind {target_kind!r}", "use llvm or cuda")


def local_fingerprint(target_kind: str, device: int = 0) -> Fingerprint:
    """This box's fingerprint for a target kind, of its device ``device`` for a GPU (the CPU
    one is cached: no TVM import)."""
    from foundation import config

    if target_kind == "llvm":
        return cached_cpu_fingerprint(config.fingerprint_cache_dir())
    return fingerprint_for(target_kind, device)


def _host_triple() -> str:
    # Host code of a CUDA library is launch glue: its triple matters (x86_64 vs aarch64 hosts
    # such as GH200), the host CPU model does not, so GPU records stay shared across hosts.
    from tvm.target import codegen

    return str(codegen.llvm_get_system_triple())


def _cuda_details_from_tvm(device: int) -> dict | None:
    try:
        import tvm

        dev = tvm.cuda(device)
        if not dev.exist:
            return None
        return {
            "name": str(dev.device_name),
            "compute_capability": str(dev.compute_version),
            "sm_count": int(dev.multi_processor_count),
            "memory_gib": _gib(int(dev.total_global_memory)),
        }
    except Exception:
        return None


def _cuda_details_from_driver(device: int) -> dict | None:
    """The same four numbers from the CUDA driver API, for when TVM's CUDA runtime cannot start.

    (Typically a driver older than the CUDA runtime TVM links.) nvidia-smi is not used for this:
    it cannot report the SM count, and it numbers GPUs by PCI bus while CUDA numbers them
    fastest-first after CUDA_VISIBLE_DEVICES, so it may describe a different GPU.
    """
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    handle, value, memory = ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
    name = ctypes.create_string_buffer(256)

    def attribute(code: int) -> int:
        if cuda.cuDeviceGetAttribute(ctypes.byref(value), code, handle) != 0:
            raise OSError(f"cuDeviceGetAttribute({code}) failed")
        return value.value

    try:
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(handle), device) != 0:
            return None
        if cuda.cuDeviceGetName(name, len(name), handle) != 0:
            return None
        if cuda.cuDeviceTotalMem_v2(ctypes.byref(memory), handle) != 0:
            return None
        # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16, COMPUTE_CAPABILITY_MAJOR/MINOR = 75/76.
        return {
            "name": name.value.decode(errors="replace"),
            "compute_capability": f"{attribute(75)}.{attribute(76)}",
            "sm_count": attribute(16),
            "memory_gib": _gib(memory.value),
        }
    except (OSError, AttributeError):
        return None


def _gib(total_bytes: int) -> int:
    # Rounded up: the runtime reports a little less than the board's size (79.2 GiB on an
    # "80GB" A100, 14.8 GiB on a T4), and nvidia-smi a little more; ceil agrees with both.
    return math.ceil(total_bytes / 2**30)


def _nvidia_smi_names() -> list[str]:
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]
