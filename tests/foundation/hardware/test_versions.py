"""Software versions: found without importing TVM, CUDA toolchain only when asked for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from foundation.hardware.versions import software_versions, tvm_version

REPO = Path(__file__).resolve().parents[3]


def test_versions_without_importing_tvm():
    code = ("import sys; from foundation.hardware.versions import software_versions, tvm_version; "
            "v = software_versions(); print(tvm_version(), v['llvm'], 'tvm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         check=True).stdout.split()
    assert out[0].startswith("0.27")
    assert re.fullmatch(r"\d+(\.\d+){2}", out[1])
    assert out[2] == "False"


def test_software_versions_by_target_kind():
    cpu = software_versions("llvm")
    assert cpu["tvm"] == tvm_version() and cpu["tvm_ffi"] and cpu["python"] == sys.version.split()[0]
    assert not any(k.startswith(("cuda", "nvcc", "nvidia")) for k in cpu)
    cuda = software_versions("cuda")
    # TVM's wheel links a CUDA runtime whatever the machine; the GPU driver may be absent.
    assert re.fullmatch(r"\d+", cuda["cuda_build"])
    assert all(isinstance(v, str) and v for v in cuda.values())


def test_the_llvm_banner_is_found_in_the_librarys_read_only_data_as_in_the_whole_file(tmp_path):
    from foundation.hardware import versions

    pattern = rb"LLVM version (\d+\.\d+\.\d+)"
    library = versions._tvm_package_dir() / "lib" / "libtvm_compiler.so"
    assert versions._search_binary(library, pattern, section=b".rodata") == versions._search_binary(library, pattern)
    # A file that is not ELF, or an ELF file without the section, is searched whole.
    text = tmp_path / "banner.txt"
    text.write_bytes(b"\0" * 4096 + b"LLVM version 1.2.3\0")
    assert versions._search_binary(text, pattern, section=b".rodata") == "1.2.3"
    assert versions._search_binary(library, pattern, section=b".no_such_section") == versions.llvm_version()
