"""float32 erf on CPUs as the farm's rational polynomial: within 4e-7 of erf, its edges, no erff call;
float64 and FARM_POLYNOMIAL_ERF=0 as TVM lowers them."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from foundation.config import POLYNOMIAL_ERF_ENV

from support.llvm_rule_builds import builds_with_rule, run_with_switch_off

SWEEP = np.concatenate([np.linspace(-6, 6, 24001), np.random.default_rng(0).normal(0, 2, 4000),
                        [0.0, -0.0, 1e-8, -1e-8, 1e-30, 3.9999, -4.0001]]).astype("float32")
EDGES = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30], dtype="float32")
EDGES_EXPECTED = [1.0, -1.0, np.nan, 1.0, -1.0]


@pytest.fixture(scope="module")
def erf_builds():
    """``build_erf(size, dtype, lanes)`` and ``run`` in this process, with the farm's rule registered."""
    from foundation.hardware.polynomial_erf import use_polynomial_erf

    with builds_with_rule(POLYNOMIAL_ERF_ENV, use_polynomial_erf) as (build, run):
        yield functools.partial(build, "erf"), run


@pytest.mark.parametrize("lanes", [None, 16], ids=["scalar", "vectorised"])
def test_float32_erf_is_within_4e7_of_erf_with_its_edges_and_no_erff_call(erf_builds, lanes):
    build_erf, run = erf_builds
    x = np.concatenate([SWEEP, EDGES])
    lib, asm = build_erf(len(x), "float32", lanes)
    got = run(lib, x)
    want = np.array([math.erf(float(v)) for v in SWEEP])
    error = np.abs(got[: len(SWEEP)] - want)
    # 3.4e-7 at worst (near x = -3.1, where erf is within 2e-6 of -1 and float32's ulp is 6e-8).
    assert error.max() < 4e-7, (error.max(), SWEEP[error.argmax()])
    assert np.all(np.abs(got[: len(SWEEP)]) <= 1.0)
    assert np.all(got[np.flatnonzero(SWEEP == 0)] == 0.0)
    np.testing.assert_array_equal(got[len(SWEEP):], np.array(EDGES_EXPECTED, dtype="float32"))
    assert "erff" not in asm and asm.count("\n") > 10, asm[:400]


def test_float64_erf_stays_libms(erf_builds):
    build_erf, run = erf_builds
    x = np.linspace(-6, 6, 4001)
    lib, asm = build_erf(len(x), "float64", 8)
    np.testing.assert_allclose(run(lib, x), [math.erf(v) for v in x], rtol=1e-15, atol=1e-300)
    assert "erf" in asm


def test_farm_polynomial_erf_0_keeps_tvms_libm_call():
    done = run_with_switch_off(POLYNOMIAL_ERF_ENV, """
        import math
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
        from foundation.hardware.polynomial_erf import use_polynomial_erf
        install_lean_tensor_intrinsics("llvm")
        assert use_polynomial_erf() is False
        x = np.linspace(-5, 5, 1024).astype("float32")
        lib, asm = build("erf", len(x), "float32", 16)
        np.testing.assert_allclose(run(lib, x), [math.erf(v) for v in x.astype("float64")], atol=1.2e-7)
        print("erff calls", asm.count("erff"))
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = int(done.stdout.strip().splitlines()[-1].split()[-1])
    assert calls > 0, done.stdout
