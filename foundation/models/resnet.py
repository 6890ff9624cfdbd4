"""ResNets as torchvision defines them (v1.5: stride on the bottleneck's 3x3), plus a CIFAR-sized tiny one."""

from __future__ import annotations

from dataclasses import dataclass

from tvm.relax.frontend import nn

from .layers import BatchNorm2d, Dense, global_avg_pool, max_pool2d

# The last BN of a residual branch starts small so 50 stacked blocks do not blow activations up.
RESIDUAL_BN_SCALE = 0.2


@dataclass(frozen=True)
class ResNetConfig:
    bottleneck: bool
    blocks: tuple[int, ...]
    widths: tuple[int, ...]
    stem: str  # "imagenet": 7x7/2 conv + 3x3/2 max pool; "cifar": one 3x3/1 conv
    num_classes: int


VARIANTS = {
    "resnet-18": ResNetConfig(False, (2, 2, 2, 2), (64, 128, 256, 512), "imagenet", 1000),
    "resnet-50": ResNetConfig(True, (3, 4, 6, 3), (64, 128, 256, 512), "imagenet", 1000),
    "resnet-152": ResNetConfig(True, (3, 8, 36, 3), (64, 128, 256, 512), "imagenet", 1000),
    "resnet-tiny": ResNetConfig(False, (1, 1, 1), (16, 32, 64), "cifar", 10),
}


def conv_bn(in_ch: int, out_ch: int, kernel: int, stride: int = 1, bn_scale: float = 1.0):
    return nn.Conv2D(in_ch, out_ch, kernel, stride, kernel // 2, bias=False), BatchNorm2d(out_ch, bn_scale)


class Downsample(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int):
        # Named "0" and "1" in torchvision (an nn.Sequential); the names only label weights.
        self.conv, self.bn = conv_bn(in_ch, out_ch, 1, stride)

    def forward(self, x):
        return self.bn(self.conv(x))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_ch: int, width: int, stride: int):
        self.conv1, self.bn1 = conv_bn(in_ch, width, 3, stride)
        self.conv2, self.bn2 = conv_bn(width, width, 3, 1, RESIDUAL_BN_SCALE)
        self.downsample = Downsample(in_ch, width, stride) if stride != 1 or in_ch != width else None

    def forward(self, x):
        out = nn.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return nn.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int):
        out_ch = width * self.expansion
        self.conv1, self.bn1 = conv_bn(in_ch, width, 1)
        self.conv2, self.bn2 = conv_bn(width, width, 3, stride)
        self.conv3, self.bn3 = conv_bn(width, out_ch, 1, 1, RESIDUAL_BN_SCALE)
        self.downsample = Downsample(in_ch, out_ch, stride) if stride != 1 or in_ch != out_ch else None

    def forward(self, x):
        out = nn.relu(self.bn1(self.conv1(x)))
        out = nn.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return nn.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, config: ResNetConfig):
        block = Bottleneck if config.bottleneck else BasicBlock
        stem_width = config.widths[0]
        self.imagenet_stem = config.stem == "imagenet"
        if self.imagenet_stem:
            self.conv1, self.bn1 = conv_bn(3, stem_width, 7, 2)
        else:
            self.conv1, self.bn1 = conv_bn(3, stem_width, 3, 1)
        in_ch = stem_width
        stages = []
        for index, (count, width) in enumerate(zip(config.blocks, config.widths)):
            blocks = []
            for position in range(count):
                stride = 2 if index > 0 and position == 0 else 1
                blocks.append(block(in_ch, width, stride))
                in_ch = width * block.expansion
            stages.append(nn.ModuleList(blocks))
        # torchvision names the stages layer1..layer4.
        for index, stage in enumerate(stages):
            setattr(self, f"layer{index + 1}", stage)
        self.num_stages = len(stages)
        self.fc = Dense(in_ch, config.num_classes)

    def forward(self, data):
        x = nn.relu(self.bn1(self.conv1(data)))
        if self.imagenet_stem:
            x = max_pool2d(x, 3, 2, 1)
        for index in range(self.num_stages):
            for block in getattr(self, f"layer{index + 1}"):
                x = block(x)
        return self.fc(global_avg_pool(x))


def network(variant: str) -> nn.Module:
    return ResNet(VARIANTS[variant])
