"""Vision Transformer B/16 as torchvision defines it (224x224, pre-norm, class token, GELU MLP)."""

from __future__ import annotations

from dataclasses import dataclass

from tvm.relax.frontend import nn

from .layers import Dense, layer_norm, multi_head_attention, set_fill
from .loaded import Fill

LN_EPS = 1e-6


@dataclass(frozen=True)
class ViTConfig:
    image_size: int
    patch_size: int
    layers: int
    heads: int
    hidden: int
    mlp_dim: int
    num_classes: int


VARIANTS = {"vit": ViTConfig(224, 16, 12, 12, 768, 3072, 1000)}


class SelfAttention(nn.Module):
    """torch.nn.MultiheadAttention's weights: one packed q/k/v projection and an output Linear.

    The packed projection is stored [in, 3 * hidden] (PyTorch's transposed) for the same reason
    as Dense: no run-time transpose of a weight.
    """

    def __init__(self, hidden: int, heads: int):
        self.heads = heads
        self.hidden = hidden
        self.in_proj_weight = nn.Parameter((hidden, 3 * hidden))
        self.in_proj_bias = nn.Parameter((3 * hidden,))
        set_fill(self.in_proj_weight, Fill.normal((1.0 / hidden) ** 0.5))
        self.out_proj = Dense(hidden, hidden)

    def forward(self, x):
        qkv = nn.matmul(x, self.in_proj_weight) + self.in_proj_bias
        q, k, v = nn.split(qkv, 3, axis=-1)
        return self.out_proj(multi_head_attention(q, k, v, self.heads))


class EncoderBlock(nn.Module):
    def __init__(self, config: ViTConfig):
        self.ln_1 = layer_norm(config.hidden, LN_EPS)
        self.self_attention = SelfAttention(config.hidden, config.heads)
        self.ln_2 = layer_norm(config.hidden, LN_EPS)
        self.mlp_fc1 = Dense(config.hidden, config.mlp_dim)
        self.mlp_fc2 = Dense(config.mlp_dim, config.hidden)

    def forward(self, x):
        x = x + self.self_attention(self.ln_1(x))
        return x + self.mlp_fc2(nn.gelu(self.mlp_fc1(self.ln_2(x))))


class VisionTransformer(nn.Module):
    def __init__(self, config: ViTConfig):
        self.config = config
        patches = (config.image_size // config.patch_size) ** 2
        self.conv_proj = nn.Conv2D(3, config.hidden, config.patch_size, config.patch_size)
        self.class_token = nn.Parameter((1, 1, config.hidden))
        self.pos_embedding = nn.Parameter((1, patches + 1, config.hidden))
        set_fill(self.class_token, Fill.const(0.0))
        set_fill(self.pos_embedding, Fill.normal(0.02))
        self.layers = nn.ModuleList([EncoderBlock(config) for _ in range(config.layers)])
        self.ln = layer_norm(config.hidden, LN_EPS)
        self.head = Dense(config.hidden, config.num_classes)

    def forward(self, data):
        batch = data.shape[0]
        hidden = self.config.hidden
        x = self.conv_proj(data)  # [B, hidden, 14, 14]
        x = nn.permute_dims(nn.reshape(x, [batch, hidden, -1]), [0, 2, 1])
        cls = nn.broadcast_to(self.class_token, [batch, 1, hidden])
        x = nn.concat([cls, x], dim=1) + self.pos_embedding
        for layer in self.layers:
            x = layer(x)
        x = self.ln(x)
        cls_out = nn.reshape(nn.split(x, [1], axis=1)[0], [batch, hidden])
        return self.head(cls_out)


def network(variant: str) -> nn.Module:
    return VisionTransformer(VARIANTS[variant])
