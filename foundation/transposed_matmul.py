"""A matmul of an activation transposed in its last two axes, computed from the activation as it is:
the transpose is folded into the matmul's reads (the NT form, both operands read along the
reduction) instead of running as a data-movement kernel between two kernels.

bert's attention scores are q @ k^T: k is split into heads ([b, s, h, d] -> [b, h, s, d]) and then
transposed ([b, h, d, s]); the two permutes fuse into one kernel that writes with a stride of s
floats, 0.23 ms a call against 0.04 ms for q's and v's split alone, the same bytes
(docs/results/profile-bert-b1-zen4.json: fused_reshape3_transpose_transpose11 against
fused_reshape3_transpose1). Folded, k's path is the same split as q's and the scores' matmul reads
k's heads row by row, as it reads q's.

Only activations are folded, and only where both operands have the same batch axes: a weight
transposed (an ONNX Gemm's transB) is rearranged once at load in a prepacked build
(LiftTransformParams) and costs nothing per inference, and its workload stays the one TVM's own
pipeline tunes, so users' TVM logs still match it. TVM's FuseTransposeMatmul folds weights too,
which is why it is not used here.
"""

from __future__ import annotations

import tvm
from tvm import relax, te
from tvm.relax.expr_functor import PyExprMutator, mutator

NAME = "NT_matmul"


def nt_matmul(a: te.Tensor, b: te.Tensor, out_dtype: str) -> te.Tensor:
    """a [..., M, K] times b [..., N, K] transposed: [..., M, N]."""
    reduce = te.reduce_axis((0, a.shape[-1]), name="k")

    def product(*index):
        batch, row, column = index[:-2], index[-2], index[-1]
        return te.sum(a[(*batch, row, reduce)].astype(out_dtype) * b[(*batch, column, reduce)].astype(out_dtype),
                      axis=reduce)

    return te.compute((*a.shape[:-1], b.shape[-2]), product, name=NAME)


def _is_op(expr, name: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == name


def _swaps_last_two(permute: relax.Call) -> bool:
    ndim = permute.args[0].ty.ndim
    if ndim < 2:
        return False
    axes = permute.attrs.axes
    if axes is None:
        return ndim == 2
    expected = [*range(ndim - 2), ndim - 1, ndim - 2]
    return [int(axis) for axis in axes] == expected


def _static_shape(expr) -> list[int] | None:
    shape = getattr(expr.ty, "shape", None)
    if shape is None:
        return None
    dims = list(shape)
    if not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
        return None
    return [int(d) for d in dims]


@mutator
class _TransposedMatmulFolder(PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not _is_op(call, "relax.matmul"):
            return call
        a, b = call.args
        permute = self.lookup_binding(b) if isinstance(b, relax.Var) else None
        if not (_is_op(permute, "relax.permute_dims") and _swaps_last_two(permute)):
            return call
        source = permute.args[0]
        # A function parameter is a weight or an input; only what the function computes is an activation.
        if not isinstance(source, relax.Var) or self.lookup_binding(source) is None:
            return call
        a_shape, source_shape = _static_shape(a), _static_shape(source)
        if (a_shape is None or source_shape is None or len(a_shape) != len(source_shape) or len(a_shape) < 2
                or a_shape[:-2] != source_shape[:-2] or a_shape[-1] != source_shape[-1]):
            return call
        return self.builder_.call_te(nt_matmul, a, source, str(call.ty.dtype), primfunc_name_hint=NAME)


@tvm.transform.module_pass(opt_level=0, name="TransposedMatmulsFolded")
def transposed_matmuls_folded(mod, _ctx):
    """Every Relax function's matmuls of a transposed activation in the NT form (module docstring)."""
    folder = _TransposedMatmulFolder(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            folder.builder_.update_func(gv, folder.visit_expr(func))
    return relax.transform.DeadCodeElimination()(folder.builder_.get())
