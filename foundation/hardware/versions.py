"""Software versions stored beside tuning records: what produced them, besides the hardware."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import mmap
import os
import platform
import re
import shutil
import struct
import subprocess
from pathlib import Path

# Distribution names on the package index (the import names are tvm and tvm_ffi).
TVM_DIST = "apache-tvm"
TVM_FFI_DIST = "apache-tvm-ffi"
FARM_DIST = "tvm-farm"


def tvm_version() -> str:
    """The installed TVM's version, without importing it (the registry hit path needs < 1 s)."""
    try:
        return importlib.metadata.version(TVM_DIST)
    except importlib.metadata.PackageNotFoundError:
        pass
    # A source build has no distribution metadata but does have tvm/_version.py.
    version_file = _tvm_package_dir() / "_version.py" if _tvm_package_dir() else None
    if version_file is not None and version_file.is_file():
        match = re.search(r"__version__\s*=.*?['\"]([^'\"]+)['\"]", version_file.read_text())
        if match:
            return match.group(1)
    return "unknown"


def build_labels() -> dict[str, str]:
    """What a daemon's `farm_build_info` gauge says it runs: tvm-farm's, TVM's and Python's versions."""
    return {"version": _dist_version(FARM_DIST) or "unknown", "tvm_version": tvm_version(),
            "python_version": platform.python_version()}


def software_versions(target_kind: str | None = None) -> dict:
    """tvm, tvm_ffi, python and LLVM versions; for "cuda" also the CUDA toolchain and driver.

    Fields that cannot be determined are left out rather than guessed.
    """
    versions = {
        "tvm": tvm_version(),
        "tvm_ffi": _dist_version(TVM_FFI_DIST),
        "python": platform.python_version(),
        "llvm": llvm_version(),
    }
    if target_kind == "cuda":
        versions.update({
            "cuda_build": cuda_build_version(),
            "cuda_runtime": cuda_runtime_version(),
            "nvcc": nvcc_version(),
            "nvidia_driver": nvidia_driver_version(),
        })
    return {k: v for k, v in versions.items() if v}


@functools.cache
def llvm_version() -> str | None:
    """The LLVM TVM was linked with, e.g. "22.1.0".

    TVM 0.27's `tvm.support.libinfo()` no longer reports LLVM_VERSION and its FFI only has the
    major version, but the statically linked LLVM carries its `--version` banner: reading it
    from the library is exact and needs no `import tvm`. The FFI major version is the fallback.
    """
    package = _tvm_package_dir()
    for name in ("lib/libtvm_compiler.so", "lib/libtvm.so", "libtvm.so"):
        if package and (package / name).is_file():
            found = _search_binary(package / name, rb"LLVM version (\d+\.\d+\.\d+)", section=b".rodata")
            if found:
                return found
    try:
        from tvm.target import codegen

        major = codegen.llvm_version_major(allow_none=True)
        return str(major) if major is not None else None
    except Exception:
        return None


@functools.cache
def cuda_build_version() -> str | None:
    """The CUDA major version TVM's CUDA runtime links (from the libcudart soname it needs)."""
    package = _tvm_package_dir()
    for name in ("lib/libtvm_runtime_cuda.so", "lib/libtvm_runtime.so", "lib/libtvm.so"):
        if package and (package / name).is_file():
            found = _search_binary(package / name, rb"libcudart\.so\.(\d+)")
            if found:
                return found
    return None


@functools.cache
def cuda_runtime_version() -> str | None:
    """The libcudart the dynamic loader resolves for TVM (works without a GPU)."""
    import ctypes

    major = cuda_build_version()
    names = [f"libcudart.so.{major}"] if major else []
    for name in names + ["libcudart.so"]:
        try:
            cudart = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int()
        if cudart.cudaRuntimeGetVersion(ctypes.byref(version)) == 0:
            return f"{version.value // 1000}.{version.value % 1000 // 10}"
    return None


@functools.cache
def nvcc_version() -> str | None:
    """nvcc's release, e.g. "13.0.88": TVM compiles CUDA kernels with it."""
    nvcc = shutil.which("nvcc")
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if nvcc is None and home and (Path(home) / "bin" / "nvcc").is_file():
            nvcc = str(Path(home) / "bin" / "nvcc")
    if nvcc is None:
        return None
    out = _run([nvcc, "--version"])
    match = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else None


@functools.cache
def nvidia_driver_version() -> str | None:
    """The kernel driver's version, e.g. "580.65.06" (None on a box without NVIDIA driver)."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        match = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text)
        if match:
            return match.group(1)
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    lines = _run([smi, "--query-gpu=driver_version", "--format=csv,noheader"]).split()
    return lines[0] if lines else None


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def _tvm_package_dir() -> Path | None:
    # find_spec of a top-level package locates it without executing its __init__.
    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _search_binary(path: Path, pattern: bytes, section: bytes | None = None) -> str | None:
    """The first group of ``pattern`` in the file, searched in its ELF ``section`` where it has one:
    the banner sits in the 13 MB of libtvm_compiler.so's read-only data past 169 MB of code, a
    scan of 0.1-0.3 s from the start of the file and of ~0.01 s from the start of the section."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            start, end = (_elf_section(data, section) if section else None) or (0, len(data))
            match = re.compile(pattern).search(data, start, end)
            # Copied out while the mapping is open: a match refers into it.
            return match.group(1).decode() if match else None
    except (OSError, ValueError, struct.error):
        return None


def _elf_section(data, name: bytes) -> tuple[int, int] | None:
    """Where section ``name`` lies in a 64-bit little-endian ELF file (start, end); None where the
    file is not one or has no such section."""
    if data[:6] != b"\x7fELF\x02\x01":
        return None
    (table,) = struct.unpack_from("<Q", data, 0x28)  # e_shoff
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)  # e_shentsize, e_shnum, e_shstrndx

    def header(index: int) -> tuple[int, int, int]:  # sh_name, sh_offset, sh_size
        sh_name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, table + index * entry_size)
        return sh_name, offset, size

    names = header(names_index)[1]
    for index in range(count):
        sh_name, offset, size = header(index)
        if data[names + sh_name:data.find(b"\0", names + sh_name)] == name:
            return offset, offset + size
    return None


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
