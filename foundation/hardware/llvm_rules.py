"""Registering the farm's lowering rules for TVM intrinsics on LLVM targets (polynomial_exp,
polynomial_erf) once per process; foundation.hardware.tvm_startup.use_farm_llvm_rules registers them all."""

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

