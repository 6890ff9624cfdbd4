"""MobileNetV2 as torchvision defines it (width 1.0, 224x224, ReLU6, inverted residuals)."""

from __future__ import annotations

from tvm.relax.frontend import nn

from .layers import BatchNorm2d, Dense, global_avg_pool

# (expansion t, output channels c, repeats n, first stride s), from the paper's Table 2.
INVERTED_RESIDUAL_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)

VARIANTS = {"mobilenet": 1000}


class ConvBN(nn.Module):
    """Conv (no bias) + BN, optionally ReLU6: torchvision's Conv2dNormActivation."""

    def __init__(self, in_ch, out_ch, kernel, stride=1, groups=1, relu6=True, bn_scale=1.0):
        self.conv = nn.Conv2D(in_ch, out_ch, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False)
        self.bn = BatchNorm2d(out_ch, bn_scale)
        self.relu6 = relu6

    def forward(self, x):
        x = self.bn(self.conv(x))
        return nn.relu6(x) if self.relu6 else x


class InvertedResidual(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, expansion: int):
        hidden = in_ch * expansion
        self.use_residual = stride == 1 and in_ch == out_ch
        self.expand = ConvBN(in_ch, hidden, 1) if expansion != 1 else None
        self.depthwise = ConvBN(hidden, hidden, 3, stride, groups=hidden)
        # Linear bottleneck; a small start on residual branches keeps stacked blocks bounded.
        self.project = ConvBN(hidden, out_ch, 1, relu6=False, bn_scale=0.2 if self.use_residual else 1.0)

    def forward(self, x):
        out = self.expand(x) if self.expand is not None else x
        out = self.project(self.depthwise(out))
        return x + out if self.use_residual else out


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000):
        in_ch = 32
        self.stem = ConvBN(3, in_ch, 3, 2)
        blocks = []
        for expansion, out_ch, repeats, first_stride in INVERTED_RESIDUAL_SETTING:
            for index in range(repeats):
                blocks.append(InvertedResidual(in_ch, out_ch, first_stride if index == 0 else 1, expansion))
                in_ch = out_ch
        self.blocks = nn.ModuleList(blocks)
        self.head = ConvBN(in_ch, 1280, 1)
        self.classifier = Dense(1280, num_classes)

    def forward(self, data):
        x = self.stem(data)
        for block in self.blocks:
            x = block(x)
        return self.classifier(global_avg_pool(self.head(x)))


def network(variant: str) -> nn.Module:
    return MobileNetV2(VARIANTS[variant])
