"""Building blocks the zoo's networks share, laid out so that no op in the graph touches only weights.

The farm passes weights as inputs (the compiled library carries none), so a transpose or
reshape of a weight would run on every inference and show up as a tuning task of its own.
Weights are therefore stored in the layout the compute wants: Dense weights [in, out],
BatchNorm vectors [C, 1, 1]. Element counts, and so parameter counts, are PyTorch's.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn.core import wrap_nested

from .loaded import Fill


def set_fill(param: nn.Parameter, fill: Fill) -> None:
    """Record how the zoo should draw this parameter's seeded values (read back at build time)."""
    param.attrs["fill"] = fill


class BatchNorm2d(nn.Module):
    """BatchNorm in inference form: a per-channel scale and shift.

    torchvision counts only BN's weight and bias as parameters (running stats are buffers); at
    inference the running stats fold into exactly these two vectors, so the graph is what a
    deployed model runs and the parameter count matches the published one.
    ``init_scale`` below 1 on a residual branch's last BN keeps deep ResNets' activations
    from doubling per block with random weights (torchvision's zero_init_residual idea).
    """

    def __init__(self, channels: int, init_scale: float = 1.0):
        self.weight = nn.Parameter((channels, 1, 1))  # broadcasts over [N, C, H, W]
        self.bias = nn.Parameter((channels, 1, 1))
        set_fill(self.weight, Fill.const(init_scale))
        set_fill(self.bias, Fill.const(0.0))

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return x * self.weight + self.bias


class Dense(nn.Module):
    """nn.Linear with its weight stored [in, out], so y = x @ W + b needs no transpose."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, init_std: float | None = None):
        self.weight = nn.Parameter((in_features, out_features))
        set_fill(self.weight, Fill.normal(init_std if init_std is not None else (2.0 / in_features) ** 0.5))
        self.bias = nn.Parameter((out_features,)) if bias else None

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        y = nn.matmul(x, self.weight)
        return y + self.bias if self.bias is not None else y


def layer_norm(dim: int, eps: float) -> nn.LayerNorm:
    norm = nn.LayerNorm(dim, eps=eps)
    set_fill(norm.weight, Fill.const(1.0))
    set_fill(norm.bias, Fill.const(0.0))
    return norm


def max_pool2d(x: nn.Tensor, size: int, stride: int, padding: int = 0, ceil_mode: bool = False) -> nn.Tensor:
    return wrap_nested(
        relax.op.nn.max_pool2d(x._expr, size, stride, padding, ceil_mode=ceil_mode), "max_pool2d"
    )


def avg_pool2d(x: nn.Tensor, size: int, stride: int, padding: int = 0) -> nn.Tensor:
    # count_include_pad=True is PyTorch's default, which torchvision's Inception relies on.
    return wrap_nested(
        relax.op.nn.avg_pool2d(x._expr, size, stride, padding, count_include_pad=True), "avg_pool2d"
    )


def global_avg_pool(x: nn.Tensor) -> nn.Tensor:
    """AdaptiveAvgPool2d(1) followed by flatten: [N, C, H, W] -> [N, C]."""
    pooled = wrap_nested(relax.op.nn.adaptive_avg_pool2d(x._expr, 1), "adaptive_avg_pool2d")
    return nn.reshape(pooled, [x.shape[0], x.shape[1]])


def flatten(x: nn.Tensor) -> nn.Tensor:
    size = 1
    for dim in x.shape[1:]:
        size *= dim
    return nn.reshape(x, [x.shape[0], size])


def multi_head_attention(q: nn.Tensor, k: nn.Tensor, v: nn.Tensor, heads: int, additive_mask=None) -> nn.Tensor:
    """Softmax(q k^T / sqrt(d) + mask) v over ``heads`` heads; q, k, v and the result are [B, S, H*D].

    Spelled out as matmuls (not one fused attention op) so MetaSchedule sees the batched
    matmuls and the softmax as the tasks a framework export would give it.
    """
    batch, seq, hidden = q.shape
    head_dim = hidden // heads

    def split_heads(t):
        return nn.permute_dims(nn.reshape(t, [batch, seq, heads, head_dim]), [0, 2, 1, 3])

    scores = nn.matmul(split_heads(q), nn.permute_dims(split_heads(k), [0, 1, 3, 2]))
    scores = scores * (1.0 / float(head_dim) ** 0.5)
    if additive_mask is not None:
        scores = scores + additive_mask
    context = nn.matmul(nn.softmax(scores, axis=-1), split_heads(v))
    return nn.reshape(nn.permute_dims(context, [0, 2, 1, 3]), [batch, seq, hidden])
