"""A Relax module's conv2d activations in blocked channels (NCHW{b}c) from the first convolution
to the last, weights left plain (OIHW) for MetaSchedule's layout rewrite to pack: the
`prepacked-nchwc` weights layout (foundation.domain.weights_layout).

Three steps before the farm's usual lowering (foundation.compile.lower_for_tuning):
1. operands broadcast against a 4-D activation at a lower rank (the zoo's BatchNorm vectors are
   [C, 1, 1]) get a leading unit axis, because Relax's ConvertLayout propagates a blocked layout
   through a binary op only when both operands have the same number of primal axes; and
   `clip` with constant bounds (ReLU6) becomes `minimum(maximum(x, lo), hi)`, because
   ConvertLayout has no layout rule for `clip` and would put a transform pair around each one;
2. `relax.transform.ConvertLayout` with a per-call choice: every groups=1 conv2d whose channels
   divide by the block reads NCHW{b}c (NCHW for a first conv whose input channels do not, e.g.
   RGB) and writes NCHW{b}c, and so does every depthwise conv2d (one group per channel); the
   layout then follows through elementwise ops and pools, and goes back to NCHW only where an
   op cannot follow it (the classifier's reshape);
3. Relax's default conv2d legalization refuses blocked layouts ("channel chunk cannot be
   legalized by TOPI"), so those conv2d calls are legalized here with TE computes of the same
   form as TOPI's conv2d_NCHWc and depthwise_conv2d_NCHWc but reading the OIHW weight as it comes.
"""

from __future__ import annotations

import tvm
from tvm import relax, te, topi
from tvm.relax.expr_functor import PyExprMutator, mutator

BROADCAST_OPS = ("relax.add", "relax.multiply", "relax.subtract", "relax.divide")
# Channels per block: one vector of float32, as onnxruntime's MLAS blocks NCHWc: 16 (AVX-512)
# where the target has AVX-512 and 16 blocks every convolution 8 would, else 8 (AVX2). Measured:
# docs/benchmarks.md, "blocked activations". BLOCK, when set, is used for every model and target
# (bench/activations_layout.py's --block).
BLOCKS_AVX512 = (16, 8)
BLOCKS_OTHER = (8,)
BLOCK: int | None = None


def _rewritten(mod, rewriter_class):
    """``mod`` with every Relax function rewritten by a fresh ``rewriter_class`` (a PyExprMutator)."""
    rewriter = rewriter_class(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()


@mutator
class _LeadingUnitAxes(PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in BROADCAST_OPS:
            return call
        a, b = call.args
        ra, rb = a.ty.ndim, b.ty.ndim
        if ra == 4 and 0 < rb < 4:
            b = self.builder_.emit(relax.op.expand_dims(b, list(range(4 - rb))))
        elif rb == 4 and 0 < ra < 4:
            a = self.builder_.emit(relax.op.expand_dims(a, list(range(4 - ra))))
        else:
            return call
        return relax.Call(call.op, [a, b], call.attrs)


@tvm.transform.module_pass(opt_level=0, name="LeadingUnitAxes")
def leading_unit_axes(mod, _ctx):
    return _rewritten(mod, _LeadingUnitAxes)


@mutator
class _ClipAsMinMax(PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name != "relax.clip":
            return call
        x, low, high = call.args
        dtype = call.ty.dtype
        floored = self.builder_.emit(relax.op.maximum(x, relax.const(float(low.value), dtype)))
        return relax.op.minimum(floored, relax.const(float(high.value), dtype))


@tvm.transform.module_pass(opt_level=0, name="ClipAsMinMax")
def clip_as_min_max(mod, _ctx):
    return _rewritten(mod, _ClipAsMinMax)


@mutator
class _VectorsReshaped(PyExprMutator):
    """layout_transform(expand_dims(v)) of a [C, 1, 1] vector into NCHW{b}c is a reshape of v
    to [1, C/b, 1, 1, b]; the build turns a reshape into a view (RewriteDataflowReshape), where
    a layout_transform stays a kernel call per vector per inference."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name != "relax.layout_transform":
            return call
        source = call.args[0]
        expanded = self.lookup_binding(source) if isinstance(source, relax.Var) else None
        if not (isinstance(expanded, relax.Call) and isinstance(expanded.op, tvm.ir.Op)
                and expanded.op.name == "relax.expand_dims"):
            return call
        shape = [int(x) for x in call.ty.shape]
        if len(shape) != 5 or shape[0] != 1 or shape[2] != 1 or shape[3] != 1:
            return call
        if [int(x) for x in source.ty.shape] != [1, shape[1] * shape[4], 1, 1]:
            return call
        return relax.op.reshape(expanded.args[0], shape)


@tvm.transform.module_pass(opt_level=0, name="VectorsReshaped")
def vectors_reshaped(mod, _ctx):
    return _rewritten(mod, _VectorsReshaped)


def block_for(mod: "tvm.IRModule", target: "tvm.target.Target") -> int:
    """Channels per block for ``mod`` on ``target``: the widest of the target's blocks that blocks
    as many of the model's convolutions as the narrowest does (MobileNet's 24-channel layers
    take 8, not 16: a model blocked in part would go back and forth between layouts)."""
    if BLOCK is not None:
        return BLOCK
    from tvm.target import codegen

    avx512 = target.kind.name == "llvm" and codegen.target_has_features("avx512f", target)
    candidates = BLOCKS_AVX512 if avx512 else BLOCKS_OTHER
    convs = []
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, lambda e: convs.append(e) if _is_conv2d(e) else None)
    blocked = {block: sum(_blocks(call, block) for call in convs) for block in candidates}
    return next(block for block in candidates if blocked[block] == blocked[candidates[-1]])


def _is_conv2d(expr) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.nn.conv2d"


def _blocks(call: relax.Call, block: int) -> bool:
    """Whether a conv2d call writes NCHW{block}c: a plain or depthwise conv whose output channels
    divide by the block."""
    attrs = call.attrs
    data, weight = call.args[0].ty.shape, call.args[1].ty.shape
    if attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW":
        return False
    out_ch, in_ch = int(weight[0]), int(data[1])
    return out_ch % block == 0 and (attrs.groups == 1 or is_depthwise(attrs.groups, in_ch, out_ch))


def layout_choice(block: int):
    def choose(call):
        if call.op.name != "relax.nn.conv2d":
            return {}
        if not _blocks(call, block):
            # Said, not left out: a conv given no layout follows its input's, blocked or not,
            # and ConvertLayout fails on a blocked input to a conv it cannot block.
            return {"relax.nn.conv2d": ["NCHW", "OIHW", "NCHW"]}
        in_ch = int(call.args[0].ty.shape[1])
        data_layout = f"NCHW{block}c" if in_ch % block == 0 else "NCHW"
        return {"relax.nn.conv2d": [data_layout, "OIHW", f"NCHW{block}c"]}
    return choose


def is_depthwise(groups: int, in_ch: int, out_ch: int) -> bool:
    """One group per channel and one output channel per group: blocked, each output block reads
    only the input block of the same channels (a grouped conv of any other shape stays NCHW)."""
    return groups == in_ch == out_ch and groups > 1


def _padded(data, kh_size: int, kw_size: int, strides, padding, dilation):
    """NCHW or NCHW{b}c ``data`` padded in height and width, and the output's height and width."""
    ih, iw = (int(x) for x in data.shape[2:4])
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    oh_size = (ih + pt + pb - (kh_size - 1) * dh - 1) // sh + 1
    ow_size = (iw + pl + pr - (kw_size - 1) * dw - 1) // sw + 1
    if pt or pl or pb or pr:
        rest = [0] * (len(data.shape) - 4)
        data = topi.nn.pad(data, [0, 0, pt, pl, *rest], [0, 0, pb, pr, *rest], name="data_pad")
    return data, oh_size, ow_size


def depthwise_conv2d_blocked(data, kernel, strides, padding, dilation, out_dtype):
    """Depthwise conv2d reading NCHW{b}c data and an [C, 1, KH, KW] kernel, writing NCHW{b}c."""
    n, c_chunk, _, _, block = (int(x) for x in data.shape)
    _, _, kh_size, kw_size = (int(x) for x in kernel.shape)
    (sh, sw), (dh, dw) = strides, dilation
    data, oh_size, ow_size = _padded(data, kh_size, kw_size, strides, padding, dilation)
    ry = te.reduce_axis((0, kh_size), name="ry")
    rx = te.reduce_axis((0, kw_size), name="rx")
    return te.compute(
        (n, c_chunk, oh_size, ow_size, block),
        lambda nn, cc, yy, xx, cb: te.sum(
            data[nn, cc, yy * sh + ry * dh, xx * sw + rx * dw, cb].astype(out_dtype)
            * kernel[cc * block + cb, 0, ry, rx].astype(out_dtype),
            axis=[ry, rx],
        ),
        name="depthwise_conv2d_NCHWc",
    )


def conv2d_blocked(data, kernel, strides, padding, dilation, out_block, out_dtype):
    """conv2d reading NCHW or NCHW{b}c data and an OIHW kernel, writing NCHW{out_block}c."""
    n = int(data.shape[0])
    ic_block = int(data.shape[4]) if len(data.shape) == 5 else None
    oc, ic, kh_size, kw_size = (int(x) for x in kernel.shape)
    (sh, sw), (dh, dw) = strides, dilation
    data, oh_size, ow_size = _padded(data, kh_size, kw_size, strides, padding, dilation)
    rc = te.reduce_axis((0, ic), name="rc")
    ry = te.reduce_axis((0, kh_size), name="ry")
    rx = te.reduce_axis((0, kw_size), name="rx")

    def read(nn, c, y, x):
        if ic_block is None:
            return data[nn, c, y, x]
        return data[nn, c // ic_block, y, x, c % ic_block]

    return te.compute(
        (n, oc // out_block, oh_size, ow_size, out_block),
        lambda nn, occ, yy, xx, ocb: te.sum(
            read(nn, rc, yy * sh + ry * dh, xx * sw + rx * dw).astype(out_dtype)
            * kernel[occ * out_block + ocb, rc, ry, rx].astype(out_dtype),
            axis=[rc, ry, rx],
        ),
        name="conv2d_NCHWc",
    )


def legalize_conv2d(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    attrs = call.attrs
    if attrs.out_layout == "NCHW" and attrs.data_layout == "NCHW":
        from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

        return _nn_conv2d(bb, call)
    out_block = int(attrs.out_layout[4:-1])
    out_dtype = call.ty.dtype
    if attrs.groups != 1:  # depthwise: layout_choice blocks no other grouped conv
        return bb.call_te(depthwise_conv2d_blocked, call.args[0], call.args[1], [int(s) for s in attrs.strides],
                          [int(p) for p in attrs.padding], [int(d) for d in attrs.dilation], str(out_dtype),
                          primfunc_name_hint="depthwise_conv2d_NCHWc")
    return bb.call_te(conv2d_blocked, call.args[0], call.args[1], [int(s) for s in attrs.strides],
                      [int(p) for p in attrs.padding], [int(d) for d in attrs.dilation], out_block,
                      str(out_dtype), primfunc_name_hint="conv2d_NCHWc")


def blocked_activations(block: int) -> tvm.transform.Pass:
    """The passes that turn a Relax module's conv2d activations into NCHW{block}c, legalized."""
    return tvm.transform.Sequential([
        converted_activations(block),
        relax.transform.LegalizeOps({"relax.nn.conv2d": legalize_conv2d}),
    ])


def converted_activations(block: int) -> tvm.transform.Pass:
    """The Relax-level part: blocked conv2d calls, layouts propagated, BN vectors reshaped."""
    return tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
        leading_unit_axes,
        clip_as_min_max,
        relax.transform.ConvertLayout({}, layout_choice(block)),
        relax.transform.Normalize(),
        vectors_reshaped,
        relax.transform.DeadCodeElimination(),
    ])


def is_vector_reshape(func: "tvm.tir.PrimFunc") -> bool:
    """Whether a task's PrimFunc turns a BatchNorm vector ([C, 1, 1]) into [1, C/b, 1, 1, b]. It
    reads only weights, so a prepacked build lifts it into `main_transform_params` (run once at
    load): tuning it would spend the budget on nothing."""
    if len(func.params) != 2:
        return False
    source, out = ([int(d) for d in param.shape] for param in func.params)  # buffer parameters in TVM 0.27
    return len(out) == 5 and out[0] == out[2] == out[3] == 1 and source[1:] == [1] * (len(source) - 1)
