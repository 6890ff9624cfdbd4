"""float32 exp on CPUs as the farm's polynomial: libm's values within two ulps, libm's edges, no expf call;
float64 and FARM_POLYNOMIAL_EXP=0 as TVM lowers them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from foundation.config import POLYNOMIAL_EXP_ENV

# Every finite float32 exp whose result is a normal float, a dense sweep and random points.
SWEEP = np.concatenate([np.linspace(-87.3, 88.7, 20001), np.random.default_rng(0).normal(0, 20, 4000),
                        [0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 0.3465, -0.3466]]).astype("float32")
EDGES = np.array([np.inf, -np.inf, np.nan, 88.73, 100.0, -87.34, -100.0, -1e30, 1e30], dtype="float32")
EDGES_EXPECTED = [np.inf, 0.0, np.nan, np.inf, np.inf, 0.0, 0.0, 0.0, np.inf]

BUILD_EXP = textwrap.dedent("""
    import numpy as np
    import tvm
    from tvm import te

    def build_exp(size, dtype, vector_lanes=None):
        a = te.placeholder((size,), dtype, name="a")
        b = te.compute((size,), lambda i: te.exp(a[i]), name="b")
        mod = tvm.IRModule({"main": te.create_prim_func([a, b])})
        if vector_lanes:
            sch = tvm.s_tir.Schedule(mod)
            (loop,) = sch.get_loops(sch.get_sblock("b"))
            sch.vectorize(sch.split(loop, [None, vector_lanes])[1])
            mod = sch.mod
        lib = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm", "num-cores": 1}))
        return lib, lib.mod.inspect_source("asm")

    def run(lib, x):
        a, b = tvm.runtime.tensor(x), tvm.runtime.tensor(np.zeros_like(x))
        lib["main"](a, b)
        return b.numpy()
""")


@pytest.fixture(scope="module")
def exp_builds():
    """``build_exp`` and ``run`` in this process, with the farm's rule registered."""
    previous = os.environ.pop(POLYNOMIAL_EXP_ENV, None)
    try:
        from foundation.hardware.polynomial_exp import use_polynomial_exp

        assert use_polynomial_exp() is True
        scope: dict = {}
        exec(BUILD_EXP, scope)  # the same helper the off-switch test runs in a fresh process
        yield scope["build_exp"], scope["run"]
    finally:
        if previous is not None:
            os.environ[POLYNOMIAL_EXP_ENV] = previous


@pytest.mark.parametrize("lanes", [None, 16], ids=["scalar", "vectorised"])
def test_float32_exp_is_libms_within_two_ulps_with_libms_edges_and_no_expf_call(exp_builds, lanes):
    build_exp, run = exp_builds
    x = np.concatenate([SWEEP, EDGES])
    lib, asm = build_exp(len(x), "float32", lanes)
    got = run(lib, x)
    want = np.exp(SWEEP.astype("float64"))
    relative = np.abs(got[: len(SWEEP)] - want) / want
    assert relative.max() < 2.5e-7, (relative.max(), SWEEP[relative.argmax()])  # float32's ulp: 1.19e-7
    assert got[np.flatnonzero(SWEEP == 0)].tolist() == [1.0, 1.0]
    edges = got[len(SWEEP):]
    np.testing.assert_array_equal(edges, np.array(EDGES_EXPECTED, dtype="float32"))
    assert "expf" not in asm and asm.count("\n") > 10, asm[:400]


def test_a_registered_rule_stays_and_says_so_when_the_switch_is_turned_off_later(exp_builds, monkeypatch):
    from foundation.hardware.polynomial_exp import use_polynomial_exp

    build_exp, _run = exp_builds
    monkeypatch.setenv(POLYNOMIAL_EXP_ENV, "0")
    assert use_polynomial_exp() is True
    _lib, asm = build_exp(64, "float32", 16)
    assert "expf" not in asm


def test_float64_exp_stays_tvms_llvm_exp(exp_builds):
    build_exp, run = exp_builds
    x = np.linspace(-700, 700, 4001)
    lib, _asm = build_exp(len(x), "float64", 8)
    np.testing.assert_allclose(run(lib, x), np.exp(x), rtol=1e-15)


def test_farm_polynomial_exp_0_keeps_tvms_libm_call():
    code = BUILD_EXP + textwrap.dedent("""
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
        from foundation.hardware.polynomial_exp import use_polynomial_exp
        install_lean_tensor_intrinsics("llvm")
        assert use_polynomial_exp() is False
        x = np.linspace(-80, 80, 1024).astype("float32")
        lib, asm = build_exp(len(x), "float32", 16)
        np.testing.assert_allclose(run(lib, x), np.exp(x.astype("float64")), rtol=1.2e-7)
        print("expf calls", asm.count("expf"))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, POLYNOMIAL_EXP_ENV: "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    calls = int(done.stdout.strip().splitlines()[-1].split()[-1])
    assert calls > 0, done.stdout
