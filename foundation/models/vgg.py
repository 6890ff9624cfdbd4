"""VGG as torchvision defines it (configuration "A" for VGG-11, no BatchNorm)."""

from __future__ import annotations

from tvm.relax.frontend import nn

from .layers import Dense, flatten, max_pool2d

# Output channels per 3x3 conv; "M" is a 2x2/2 max pool.
VARIANTS = {
    "vgg-11": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
}


class VGG(nn.Module):
    def __init__(self, layout: tuple, num_classes: int = 1000):
        self.layout = layout
        convs = []
        in_ch = 3
        for item in layout:
            if item != "M":
                convs.append(nn.Conv2D(in_ch, item, 3, 1, 1))
                in_ch = item
        self.features = nn.ModuleList(convs)
        # Dropout is an identity at inference, so the classifier is three Linears.
        self.fc1 = Dense(512 * 7 * 7, 4096)
        self.fc2 = Dense(4096, 4096)
        self.fc3 = Dense(4096, num_classes)

    def forward(self, data):
        x = data
        convs = iter(self.features)
        for item in self.layout:
            x = max_pool2d(x, 2, 2) if item == "M" else nn.relu(next(convs)(x))
        # torchvision's AdaptiveAvgPool2d((7, 7)) is an identity on the 7x7 map a 224x224 input gives.
        x = flatten(x)
        x = nn.relu(self.fc1(x))
        x = nn.relu(self.fc2(x))
        return self.fc3(x)


def network(variant: str) -> nn.Module:
    return VGG(VARIANTS[variant])
