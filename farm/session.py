"""What every command resolves first: the registry, this box's fingerprint, the target."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation import config
from foundation.hardware.fingerprint import local_fingerprint

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.hardware.fingerprint import Fingerprint
    from foundation.registry.store import RegistryStore


@dataclass
class FarmContext:
    store: "RegistryStore"
    fingerprint: "Fingerprint"
    target: dict
    target_json: str
    tvm_version: str

    @functools.cached_property
    def software(self) -> dict:
        from foundation.hardware.versions import software_versions

        return software_versions(self.target["kind"])

    def tvm_target(self) -> "tvm.target.Target":
        from foundation.hardware.targets import to_tvm_target

        return to_tvm_target(self.target)


def open_store(registry_option: str | None) -> "RegistryStore":
    from foundation.registry.store import RegistryStore

    return RegistryStore(config.registry_url(registry_option))


def open_context(registry_option: str | None, user_target: str) -> FarmContext:
    """Validate the target, detect the fingerprint, then open the registry (in that order,
    so that bad input is refused before anything is created)."""
    from foundation.hardware.targets import canonical_target, parse_target_kind, target_json
    from foundation.hardware.versions import tvm_version

    kind = parse_target_kind(user_target)
    fingerprint = local_fingerprint(kind)
    target = canonical_target(user_target, fingerprint)
    store = open_store(registry_option)
    return FarmContext(store, fingerprint, target, target_json(target), tvm_version())
