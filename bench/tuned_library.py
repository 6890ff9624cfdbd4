"""A bench script's tuned library: the registry opened (refused before TVM's import when missing),
TVM started lean, the model's seeded weights and inputs made and its stored library loaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TunedLibrary:
    ctx: Any  # farm.session's context of the registry
    model: Any  # foundation.models' loaded model
    weights: Any
    inputs: Any
    deployed: Any  # farm.load's DeployedModel


def load_tuned_library(name: str, batch: int, registry: str | None, target: str) -> TunedLibrary:
    """Raises FarmError: an unreadable registry (4), an unknown model (2), no tuned library (3)."""
    from farm.session import open_context

    ctx = open_context(registry, target)
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics, pin_tvm_threads

    pin_tvm_threads()
    install_lean_tensor_intrinsics(target)
    import farm
    from foundation.models.loading import load_model

    model = load_model(name, batch)
    weights, inputs = model.make_weights(0), model.make_inputs(0)
    deployed = farm.load(name, target, batch=batch, registry=registry, weights=weights)
    return TunedLibrary(ctx, model, weights, inputs, deployed)
