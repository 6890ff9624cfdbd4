"""The coordinator's /healthz on its metrics port: what its gRPC health service says, for probes that speak HTTP."""

from __future__ import annotations

import enum

from coordinator.registry_health import RegistryHealth


class _Phase(enum.Enum):
    STARTING = "the coordinator is starting: its API does not serve yet"
    SERVING = "serving"
    DRAINING = "the coordinator is stopping: it takes no new calls"


class ServingHealth:
    """Alive (200) while the coordinator serves; 503 before its API serves, while its registry
    fails and once it drains, as its gRPC health service then says NOT_SERVING. The metrics port
    starts before the API does, so the coordinator tells this object when it serves and when it
    stops (``serves()``, ``draining()``)."""

    def __init__(self, registry: RegistryHealth):
        self.registry = registry
        self._phase = _Phase.STARTING

    def serves(self) -> None:
        self._phase = _Phase.SERVING

    def draining(self) -> None:
        self._phase = _Phase.DRAINING

    def __call__(self) -> tuple[bool, str]:
        phase, error = self._phase, self.registry.error
        if phase is _Phase.SERVING and error is not None:
            return False, f"not serving: the coordinator's registry is failing: {error}"
        return phase is _Phase.SERVING, phase.value
