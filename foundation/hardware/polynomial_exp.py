"""float32 `exp` on LLVM targets as a polynomial the loop can vectorise, not a libm call per element.

TVM lowers `exp` for LLVM to the `llvm.exp` intrinsic, which LLVM emits as a call to libm's
scalar `expf` for every element, so no schedule can vectorise a softmax around it: bert's
softmax ran 9.6x onnxruntime's (docs/benchmarks.md, "bert b1 on a Zen 4"). onnxruntime (MLAS)
and TVM's own `topi.fast_exp` compute e^x as 2^n times a polynomial of the remainder; this
registers the same (Cephes' expf polynomial, as topi's) as TVM's lowering of float32 `exp` for
LLVM. It acts at code generation: the workloads, their structural hashes and every stored or
imported record stay the same; only the machine code of a build changes. Edges as libm's:
inf above float32's range, NaN stays NaN; below e^-87.3 (float32's smallest normal) 0, where
libm gives subnormals.

`FARM_POLYNOMIAL_EXP=0` keeps TVM's libm call (foundation.config.polynomial_exp).
"""

from __future__ import annotations

LOG2E = 1.4426950408889634
# ln 2 split in two (Cephes): n * LN2_HI is exact for the n used here, so the remainder keeps its bits.
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
# e^r ~ 1 + r + r^2 * P(r) for |r| <= ln2 / 2 (Cephes expf; topi.fast_exp's coefficients).
COEFFICIENTS = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                5.0000001201e-1)
OVERFLOW = 88.72283935546875  # ln(FLT_MAX): above it e^x is inf
UNDERFLOW = -87.33654022216797  # ln(FLT_MIN): below it e^x is subnormal, given as 0
# 2^n is built from n's bits; n stays where its biased exponent is a normal float's.
N_LOWEST, N_HIGHEST = -126, 127


def polynomial_exp(call):
    """TVM's lowering rule for ``tirx.exp``: float32 (scalar or vector) as the polynomial, any
    other type as TVM's own `llvm.exp`."""
    from tvm import tirx

    x = call.args[0]
    dtype = x.ty.dtype  # "float32", or "float32x16" in a vectorised loop
    if not dtype.is_float or dtype.bits != 32:
        return tirx.call_llvm_pure_intrin(dtype, "llvm.exp", x)
    ints = "int32" if dtype.lanes == 1 else f"int32x{dtype.lanes}"

    def const(value, of=dtype):
        return tirx.const(value, of)

    clamped = tirx.min(x, const(OVERFLOW))
    n = tirx.max(tirx.min(tirx.floor(clamped * const(LOG2E) + const(0.5)), const(N_HIGHEST)), const(N_LOWEST))
    r = clamped - n * const(LN2_HI) - n * const(LN2_LO)
    p = const(COEFFICIENTS[0])
    for coefficient in COEFFICIENTS[1:]:
        p = p * r + const(coefficient)
    near_one = p * r * r + r + const(1.0)
    two_to_n = tirx.reinterpret(dtype, tirx.shift_left(tirx.Cast(ints, n) + const(127, ints), const(23, ints)))
    e = near_one * two_to_n
    e = tirx.Select(x > const(OVERFLOW), const(float("inf")), e)
    e = tirx.Select(x < const(UNDERFLOW), const(0.0), e)
    return tirx.Select(tirx.isnan(x), x, e)


def use_polynomial_exp() -> bool:
    """Register the rule in this process unless FARM_POLYNOMIAL_EXP=0; whether builds here use it
    (once registered, for the process's life: foundation.hardware.llvm_rules)."""
    from foundation.config import polynomial_exp as wanted
    from foundation.hardware.llvm_rules import register_llvm_rule

    return register_llvm_rule("tirx.exp", polynomial_exp, wanted)
