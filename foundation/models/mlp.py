"""The smallest model to tune: two Linear layers with a ReLU between them."""

from __future__ import annotations

from tvm.relax.frontend import nn

from .layers import Dense

# (input features, hidden features, classes)
VARIANTS = {"mlp-tiny": (64, 128, 10)}


class MLP(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int):
        self.fc1 = Dense(features, hidden)
        self.fc2 = Dense(hidden, classes)

    def forward(self, data):
        return self.fc2(nn.relu(self.fc1(data)))


def network(variant: str) -> nn.Module:
    return MLP(*VARIANTS[variant])
