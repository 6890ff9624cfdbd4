"""What every command resolves first: the registry, this box's fingerprint, the target."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from farm import config

if TYPE_CHECKING:  # pragma: no cover
    import tvm
    from agent.fingerprint import Fingerprint
    from coordinator.registry.store import RegistryStore


@dataclass
class FarmContext:
    store: "RegistryStore"
    fingerprint: "Fingerprint"
    target: dict
    target_json: str
    tvm_version: str

    @functools.cached_property
    def software(self) -> dict:
        from farm.versions import software_versions

        return software_versions(self.target["kind"])

    def tvm_target(self) -> "tvm.target.Target":
        from farm.targets import to_tvm_target

        return to_tvm_target(self.target)


def local_fingerprint(target_kind: str) -> "Fingerprint":
    """This box's fingerprint for a target kind (the CPU one is cached: no TVM import)."""
    from agent.fingerprint import cached_cpu_fingerprint, fingerprint_for

    if target_kind == "llvm":
        return cached_cpu_fingerprint(config.fingerprint_cache_dir())
    return fingerprint_for(target_kind)


def open_store(registry_option: str | None) -> "RegistryStore":
    from coordinator.registry.store import RegistryStore

    return RegistryStore(config.registry_url(registry_option))


def open_context(registry_option: str | None, user_target: str) -> FarmContext:
    """Validate the target, detect the fingerprint, then open the registry (in that order,
    so that bad input is refused before anything is created)."""
    from farm.targets import canonical_target, parse_target_kind, target_json
    from farm.versions import tvm_version

    kind = parse_target_kind(user_target)
    fingerprint = local_fingerprint(kind)
    target = canonical_target(user_target, fingerprint)
    store = open_store(registry_option)
    return FarmContext(store, fingerprint, target, target_json(target), tvm_version())
