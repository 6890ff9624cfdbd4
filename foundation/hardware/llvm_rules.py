"""The farm's lowering rules for TVM intrinsics on LLVM targets (polynomial_exp, polynomial_erf),
registered once per process."""

from __future__ import annotations

from collections.abc import Callable

_registered: set[str] = set()


def register_llvm_rule(op: str, rule: Callable, wanted: Callable[[], bool]) -> bool:
    """Register ``rule`` as TVM's lowering of ``op`` for every LLVM target unless ``wanted()`` says
    no; whether builds in this process use it.

    Once registered it stays for the process's life (TVM has no way to take a rule back), so a
    later "no" changes nothing and this still says True."""
    if op in _registered:
        return True
    if not wanted():
        return False
    from tvm.tirx import register_intrin_lowering

    # Above TVM's own LLVM rules (level 10), which it replaces for every LLVM target.
    register_intrin_lowering(op, target="llvm", f=rule, level=99)
    _registered.add(op)
    return True


def use_farm_llvm_rules() -> None:
    """Register every rule its switch allows: each process that builds for a CPU calls this before
    it builds, the builder workers included, so candidates are measured as the library is built."""
    from foundation.hardware.polynomial_erf import use_polynomial_erf
    from foundation.hardware.polynomial_exp import use_polynomial_exp

    use_polynomial_exp()
    use_polynomial_erf()
