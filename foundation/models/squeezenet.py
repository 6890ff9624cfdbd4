"""SqueezeNet 1.1 as torchvision defines it (fire modules, ceil-mode pooling, conv classifier)."""

from __future__ import annotations

from tvm.relax.frontend import nn

from .layers import global_avg_pool, max_pool2d

VARIANTS = {"squeezenet_v1.1": 1000}


class Fire(nn.Module):
    def __init__(self, in_ch: int, squeeze: int, expand1x1: int, expand3x3: int):
        self.squeeze = nn.Conv2D(in_ch, squeeze, 1)
        self.expand1x1 = nn.Conv2D(squeeze, expand1x1, 1)
        self.expand3x3 = nn.Conv2D(squeeze, expand3x3, 3, padding=1)

    def forward(self, x):
        x = nn.relu(self.squeeze(x))
        return nn.concat([nn.relu(self.expand1x1(x)), nn.relu(self.expand3x3(x))], dim=1)


class SqueezeNet11(nn.Module):
    def __init__(self, num_classes: int = 1000):
        self.conv1 = nn.Conv2D(3, 64, 3, 2)
        self.fire2 = Fire(64, 16, 64, 64)
        self.fire3 = Fire(128, 16, 64, 64)
        self.fire4 = Fire(128, 32, 128, 128)
        self.fire5 = Fire(256, 32, 128, 128)
        self.fire6 = Fire(256, 48, 192, 192)
        self.fire7 = Fire(384, 48, 192, 192)
        self.fire8 = Fire(384, 64, 256, 256)
        self.fire9 = Fire(512, 64, 256, 256)
        self.classifier = nn.Conv2D(512, num_classes, 1)

    def forward(self, data):
        x = nn.relu(self.conv1(data))
        x = max_pool2d(x, 3, 2, ceil_mode=True)
        x = self.fire3(self.fire2(x))
        x = max_pool2d(x, 3, 2, ceil_mode=True)
        x = self.fire5(self.fire4(x))
        x = max_pool2d(x, 3, 2, ceil_mode=True)
        x = self.fire9(self.fire8(self.fire7(self.fire6(x))))
        return global_avg_pool(nn.relu(self.classifier(x)))


def network(variant: str) -> nn.Module:
    return SqueezeNet11(VARIANTS[variant])
