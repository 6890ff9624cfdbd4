"""A built candidate is exported as one shared library that `ld` links alone, and still computes
what it should; whatever `ld` cannot link by itself is exported as TVM exports it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from foundation.meta_schedule import candidate_export
from foundation.meta_schedule.candidate_export import export_candidate, link_shared

from support.tvm_records import matmul_module

N = 32
ELF_MAGIC = b"\x7fELF"
ET_DYN = 3  # a shared object, in the ELF header's e_type


def _built(target: dict):
    import tvm

    return tvm.tirx.build(matmul_module(N), target=tvm.target.Target(target))


def _is_shared_object(path: Path) -> bool:
    header = path.read_bytes()[:18]
    return header[:4] == ELF_MAGIC and int.from_bytes(header[16:18], "little") == ET_DYN


@pytest.fixture
def tvms_linker_refused(monkeypatch):
    """TVM's linker (g++) made to fail: an export that reaches it fails."""
    from tvm.support import cc

    def refuse(*args, **kwargs):
        raise AssertionError(f"TVM's create_shared was called: {args}")

    monkeypatch.setattr(cc, "create_shared", refuse)


@pytest.mark.skipif(candidate_export.linker() is None, reason="no `ld` on this machine: TVM's export is used")
def test_a_cpu_candidate_is_a_shared_library_linked_by_ld_that_computes_the_matmul(tvms_linker_refused):
    import tvm

    path = Path(export_candidate(_built({"kind": "llvm", "num-cores": 2})))
    assert path.suffix == ".so" and _is_shared_object(path), path
    module = tvm.runtime.load_module(str(path))
    rng = np.random.default_rng(0)
    a, b = (rng.random((N, N), dtype="float32") for _ in range(2))
    c = tvm.runtime.tensor(np.zeros((N, N), "float32"))
    module["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5)


def test_a_candidate_for_another_architecture_is_left_to_its_device_to_link():
    other = "x86_64-linux-gnu" if os.uname().machine == "aarch64" else "aarch64-linux-gnu"
    path = Path(export_candidate(_built({"kind": "llvm", "mtriple": other})))
    assert path.suffix == ".tar", path  # MetaSchedule's own export: the device's runtime links it


def test_inputs_other_than_objects_go_to_tvms_linker(tmp_path):
    source = tmp_path / "answer.cc"  # TVM's linker is a C++ compiler
    source.write_text('extern "C" int answer(void) { return 42; }\n')
    output = tmp_path / "answer.so"
    link_shared(str(output), [str(source)])
    import ctypes

    assert ctypes.CDLL(str(output)).answer() == 42


def test_a_link_that_fails_is_done_again_by_tvms_linker(monkeypatch, tmp_path):
    monkeypatch.setattr(candidate_export, "linker", lambda: "/bin/false")
    path = Path(export_candidate(_built({"kind": "llvm", "num-cores": 2})))
    assert path.suffix == ".so" and _is_shared_object(path)
