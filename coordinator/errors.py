"""The coordinator's errors: what its calls refuse, each mapped to one gRPC status (coordinator.servicer)."""

from __future__ import annotations

from foundation.errors import FarmError


class InvalidRequest(FarmError):
    """The caller asked for something that cannot be done as asked (bad model, target, ...)."""


class Unavailable(FarmError):
    """The coordinator is shutting down and takes no new work."""


class AgentRefused(FarmError):
    """An agent that cannot take part (e.g. another TVM version than the coordinator's)."""


class DamagedCostModel(FarmError):
    """A stored cost model whose bytes no longer match their sha256."""
