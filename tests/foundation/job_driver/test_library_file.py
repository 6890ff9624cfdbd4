"""A stored library is checked as a loader would map it, from its ELF headers (no TVM)."""

from __future__ import annotations

import os

import pytest

from foundation.job_driver.library_file import shared_library_problem, tvm_library_problem

from support.shared_libraries import python_extension_library


@pytest.fixture(scope="module")
def library() -> bytes:
    """A real shared library of this box that TVM did not build."""
    return python_extension_library()


def test_a_shared_library_whole_is_one(library):
    assert shared_library_problem(library) is None


@pytest.mark.parametrize("damaged, said", [
    (lambda lib: os.urandom(len(lib)), "not an ELF file"),
    (lambda lib: lib[:len(lib) // 2], "cut short"),
    (lambda lib: lib[:40], "ELF header is damaged"),
    (lambda lib: lib[:16] + b"\x02\x00" + lib[18:], "not a shared library"),  # ET_EXEC, little-endian
    (lambda lib: b"", "not an ELF file"),
])
def test_what_a_loader_could_not_map_is_said(library, damaged, said):
    problem = shared_library_problem(damaged(library))
    assert problem is not None and said in problem


@pytest.fixture(scope="module")
def tvm_library() -> bytes:
    """A library TVM built: mlp-tiny, untuned."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    from foundation.compile import build_library
    from foundation.models.loading import load_model

    return build_library(load_model("mlp-tiny", 1), tvm.target.Target({"kind": "llvm", "num-cores": 2}), None)


def test_a_library_tvm_built_is_one(tvm_library):
    assert shared_library_problem(tvm_library) is None
    assert tvm_library_problem(tvm_library) is None


def test_a_shared_library_tvm_did_not_build_is_said(library):
    # Bytes replaced with another real library (and its size and sha256): a loader maps it, TVM finds nothing in it.
    problem = tvm_library_problem(library)
    assert problem is not None and "not one TVM built" in problem and "__tvm_ffi__library_bin" in problem


def test_a_library_whose_symbol_table_is_cut_away_is_said(tvm_library):
    problem = tvm_library_problem(tvm_library[:len(tvm_library) * 3 // 4])
    assert problem is not None
