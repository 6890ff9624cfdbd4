"""A fingerprint the registry knows, as the value a job's canonical target is worked out on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.errors import InvalidRequest
from foundation.hardware.fingerprint import Fingerprint

if TYPE_CHECKING:  # pragma: no cover
    from foundation.registry.store import RegistryStore


def registered_fingerprint(store: "RegistryStore", fp_id: str) -> Fingerprint:
    """A fingerprint the registry knows, as foundation.hardware's value (targets are worked out on it)."""
    stored = store.get_fingerprint(fp_id)
    if stored is None:
        raise InvalidRequest(f"fingerprint {fp_id!r} is not in the registry",
                             "start an agent of that fingerprint first")
    # The stored id is trusted, not recomputed (see Fingerprint.from_json).
    return Fingerprint(stored.id, stored.kind, stored.summary, dict(stored.details))
