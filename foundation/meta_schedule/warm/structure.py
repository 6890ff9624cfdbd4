"""Which workloads share a fused-operator structure, and how far apart their shapes are.

Two workloads with the same blocks (names, spatial/reduction iterators, output types) in the
same order are the same fused operators at other shapes: resnet-50's and resnet-152's
convolutions, one model at two batch sizes. Their schedules are worth transplanting
(foundation.meta_schedule.warm.transplant decides whether one actually applies).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import tvm

_ITER_TYPE = {0: "S", 2: "R"}  # IterVar kinds in a block: data-parallel, reduction; others "O"


def _function(mod: "tvm.IRModule"):
    functions = list(mod.functions.values())
    return mod["main"] if any(g.name_hint == "main" for g in mod.get_global_vars()) else functions[0]


def structure_key(mod: "tvm.IRModule") -> str:
    """The workload's blocks without their shapes, e.g. ``pad_temp:SSSS:float32|conv2d_nchw:SSSSRRR:float32``."""
    from tvm.s_tir import Schedule

    schedule = Schedule(mod)
    root = schedule.get_sblock("root")
    parts = []
    for rv in schedule.get_child_blocks(root):
        block = schedule.get(rv)
        iters = "".join(_ITER_TYPE.get(int(iv.iter_type), "O") for iv in block.iter_vars)
        dtype = str(block.writes[0].source.dtype) if len(block.writes) else ""
        parts.append(f"{block.name_hint}:{iters}:{dtype}")
    return "|".join(parts)


def shape_distance(a: "tvm.IRModule", b: "tvm.IRModule") -> float:
    """How different the two workloads' argument shapes are: the sum of |log| of the ratios of
    corresponding dimensions (0 for equal shapes); infinite when the arguments do not line up."""
    shapes_a, shapes_b = _shapes(a), _shapes(b)
    if len(shapes_a) != len(shapes_b):
        return math.inf
    total = 0.0
    for sa, sb in zip(shapes_a, shapes_b):
        if len(sa) != len(sb):
            return math.inf
        total += sum(abs(math.log(max(x, 1)) - math.log(max(y, 1))) for x, y in zip(sa, sb))
    return total


def _shapes(mod: "tvm.IRModule") -> list[list[int]]:
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return [[int(d) for d in getattr(info, "shape", ())] for info in ArgInfo.from_prim_func(_function(mod))]
