"""A one-op TIR kernel (exp, erf) built for LLVM, scalar or vectorised, with the farm's lowering rule
registered (foundation.hardware.llvm_rules) or, in a fresh process, switched off."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# Run here and, as source, in the fresh process of an off-switch test.
BUILD = textwrap.dedent("""
    import numpy as np
    import tvm
    from tvm import te

    def build(function, size, dtype, vector_lanes=None):
        a = te.placeholder((size,), dtype, name="a")
        b = te.compute((size,), lambda i: getattr(te, function)(a[i]), name="b")
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


@contextmanager
def builds_with_rule(switch: str, use_rule: Callable[[], bool]) -> Iterator[tuple[Callable, Callable]]:
    """``build(function, size, dtype, lanes)`` and ``run(lib, x)`` in this process, the rule
    registered (``switch`` unset meanwhile, so that its default holds)."""
    previous = os.environ.pop(switch, None)
    try:
        assert use_rule() is True
        scope: dict = {}
        exec(BUILD, scope)
        yield scope["build"], scope["run"]
    finally:
        if previous is not None:
            os.environ[switch] = previous


def run_with_switch_off(switch: str, code: str) -> subprocess.CompletedProcess:
    """``code`` after BUILD in a fresh Python with ``switch`` at 0 (the rule never registered there)."""
    return subprocess.run([sys.executable, "-c", BUILD + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, switch: "0"})
