"""float32 `erf` on LLVM targets as a rational polynomial the loop can vectorise, not a libm call
per element.

TVM lowers `erf` for LLVM to a call of libm's scalar `erff` for every element, so no schedule can
vectorise the GELU after a transformer's dense layer: bert's 768->3072 matmul with its GELU ran
3.2 ms a call on activations against 1.4 on zeros (where erff returns at once) on a Zen 5, and
the polynomial took bert b1 from 76.9 to 61.8 ms (docs/benchmarks.md, "erf as a polynomial").
This registers, as TVM's lowering of float32 `erf` for LLVM, the odd/even rational approximation
that Eigen, XLA and TVM's own `topi.fast_erf` use, on x clamped to [-4, 4] (beyond it erf is
+-1 in float32), the result kept within [-1, 1]; within 3.4e-7 of erf (libm's erff: about 1e-7). Like
foundation.hardware.polynomial_exp it acts at code generation: workloads and records are
unchanged. NaN stays NaN.

`FARM_POLYNOMIAL_ERF=0` keeps TVM's libm call (foundation.config.polynomial_erf).
"""

from __future__ import annotations

CLAMP = 4.0
# erf(x) ~ x * P(x^2) / Q(x^2) on [-4, 4]; coefficients highest power first.
NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
             -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
               -1.42647390514189e-02)


def polynomial_erf(call):
    """TVM's lowering rule for ``tirx.erf``: float32 (scalar or vector) as the rational polynomial,
    any other type as TVM lowers it for every target (libm's erf for float64)."""
    import tvm
    from tvm import tirx

    x = call.args[0]
    dtype = x.ty.dtype  # "float32", or "float32x16" in a vectorised loop
    if not dtype.is_float or dtype.bits != 32:
        return tvm.ir.Op.get("tirx.erf").get_attr("default.FLowerIntrinsic")(call)

    def horner(coefficients, at):
        value = tirx.const(coefficients[0], dtype)
        for coefficient in coefficients[1:]:
            value = value * at + tirx.const(coefficient, dtype)
        return value

    clamped = tirx.max(tirx.min(x, tirx.const(CLAMP, dtype)), tirx.const(-CLAMP, dtype))
    squared = clamped * clamped
    ratio = clamped * horner(NUMERATOR, squared) / horner(DENOMINATOR, squared)
    one = tirx.const(1.0, dtype)
    bounded = tirx.max(tirx.min(ratio, one), -one)  # the ratio overshoots 1 by an ulp near the clamp
    return tirx.Select(tirx.isnan(x), x, bounded)


def use_polynomial_erf() -> bool:
    """Register the rule in this process unless FARM_POLYNOMIAL_ERF=0; whether builds here use it
    (once registered, for the process's life: foundation.hardware.llvm_rules)."""
    from foundation.config import polynomial_erf as wanted
    from foundation.hardware.llvm_rules import register_llvm_rule

    return register_llvm_rule("tirx.erf", polynomial_erf, wanted)
