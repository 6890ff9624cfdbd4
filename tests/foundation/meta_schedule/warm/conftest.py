"""Fixtures of the warm-start tests: a CPU target with only its own tensor intrinsics."""

import pytest


@pytest.fixture(scope="module")
def target():
    """A 2-core llvm target (the constants a design space carries depend on the core count)."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    return tvm.target.Target({"kind": "llvm", "num-cores": 2})
