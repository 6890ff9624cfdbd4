"""float32 exp on CPUs as the farm's polynomial: libm's values within two ulps, libm's edges, no expf call;
float64 and FARM_POLYNOMIAL_EXP=0 as TVM lowers them."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from foundation.config import POLYNOMIAL_EXP_ENV

from support.llvm_rule_builds import builds_with_rule, run_with_switch_off

# Every finite float32 exp whose result is a normal float, a dense sweep and random points.
SWEEP = np.concatenate([np.linspace(-87.3, 88.7, 20001), np.random.default_rng(0).normal(0, 20, 4000),
                        [0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 0.3465, -0.3466]]).astype("float32")
EDGES = np.array([np.inf, -np.inf, np.nan, 88.73, 100.0, -87.34, -100.0, -1e30, 1e30], dtype="float32")
EDGES_EXPECTED = [np.inf, 0.0, np.nan, np.inf, np.inf, 0.0, 0.0, 0.0, np.inf]


@pytest.fixture(scope="module")
def exp_builds():
    """``build_exp(size, dtype, lanes)`` and ``run`` in this process, with the farm's rule registered."""
    from foundation.hardware.polynomial_exp import use_polynomial_exp

    with builds_with_rule(POLYNOMIAL_EXP_ENV, use_polynomial_exp) as (build, run):
        yield functools.partial(build, "exp"), run


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
    done = run_with_switch_off(POLYNOMIAL_EXP_ENV, """
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
        from foundation.hardware.polynomial_exp import use_polynomial_exp
        install_lean_tensor_intrinsics("llvm")
        assert use_polynomial_exp() is False
        x = np.linspace(-80, 80, 1024).astype("float32")
        lib, asm = build("exp", len(x), "float32", 16)
        np.testing.assert_allclose(run(lib, x), np.exp(x.astype("float64")), rtol=1.2e-7)
        print("expf calls", asm.count("expf"))
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = int(done.stdout.strip().splitlines()[-1].split()[-1])
    assert calls > 0, done.stdout
