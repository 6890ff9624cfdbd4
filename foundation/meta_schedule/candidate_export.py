"""Candidates exported as shared libraries that `ld` links alone.

MetaSchedule's builder exports each candidate as a gzipped tar of its object file, and the runner
untars it and links it with g++ before loading it: eight processes a candidate (tar, sh, gzip,
tar, gzip, g++, collect2, ld), whose linking alone is ~14 CPU-ms, most of it ld reading
libstdc++'s symbols for an object that uses none of them. The object LLVM emits for a CPU needs nothing of
g++'s start files or C++ runtime: `ld -shared` links it against libm and libc, which is all it
can call, in ~6 ms, and the runner (or the RPC server it is uploaded to) loads the library as it is.

Everything else is exported as TVM exports it: a module whose objects are not all LLVM's (C source
to compile), one built for another machine's triple (its device links it with its own tools),
a machine without `ld`, or a link that fails.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import shutil
import subprocess
import tempfile

# The libraries an LLVM object for a CPU may call into (math functions, memset and memcpy),
# linked only if it does (--as-needed), as g++ links them.
LINKED_LIBRARIES = ("-lm", "-lc")

log = logging.getLogger(__name__)


def export_candidate(mod) -> str:
    """MetaSchedule's `f_export`: the path of ``mod`` (a built candidate) as a shared library."""
    from tvm.s_tir.meta_schedule.builder.local_builder import default_export

    if linker() is None or not _built_for_this_machine(mod):
        return default_export(mod)
    path = os.path.join(tempfile.mkdtemp(), "tvm_tmp_mod.so")
    mod.export_library(path, fcompile=link_shared)
    return path


def link_shared(output: str, objects, options=None, **kwargs) -> None:
    """An `export_library` fcompile: `ld -shared` where every input is an object, else TVM's own."""
    from tvm.support import cc

    ld = linker()
    if ld is None or options or kwargs or not all(str(o).endswith(".o") for o in objects):
        cc.create_shared(output, objects, options, **kwargs)
        return
    done = subprocess.run([ld, "-shared", "--as-needed", "-o", output, *map(str, objects), *LINKED_LIBRARIES],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log.debug("ld could not link %s alone (%s); TVM's linker links it", output, done.stderr.strip()[:200])
        cc.create_shared(output, objects, options)


@functools.lru_cache(maxsize=1)
def linker() -> str | None:
    if platform.system() != "Linux":
        return None
    return shutil.which("ld")


def _built_for_this_machine(mod) -> bool:
    """Whether ``mod``'s host code is LLVM's for this machine's architecture (a target without a
    triple is built for the machine that builds it)."""
    from foundation.hardware.targets import triple_arch

    if mod.kind != "llvm":
        return False
    try:
        target = json.loads(mod.get_function("_get_target_string")())
    except (AttributeError, ValueError, TypeError):
        return False
    triple = str(target.get("mtriple", "") or "") if isinstance(target, dict) else ""
    return not triple or (triple_arch(triple) == triple_arch(platform.machine()) and "linux" in triple)
