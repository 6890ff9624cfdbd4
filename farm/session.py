"""What every command resolves first: the registry, this box's fingerprint, the target.

Only commands that create data (`submit`, `coordinator`, `registry import`, `registry init`)
open the registry with ``create=True``; the others refuse a registry that does not exist
rather than make an empty one where a mistyped path points.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation import config
from foundation.errors import BadInput
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


def open_store(registry_option: str | None, *, create: bool = False) -> "RegistryStore":
    from foundation.registry.engine import parse_registry_url, sqlite_in_memory
    from foundation.registry.store import RegistryStore

    url = config.registry_url(registry_option)
    if url == config.default_registry_url():  # FARM_HOME's registry: a FARM_HOME it cannot be in is named
        config.checked_data_dir(create=create)
    if sqlite_in_memory(parse_registry_url(url)):
        raise BadInput(f"the registry {url!r} is in memory: it would keep nothing after this command",
                       "give a file, such as sqlite:///path/to/registry.db")
    return RegistryStore(url, create=create)


def open_context(registry_option: str | None, user_target: str, *, create: bool = False,
                 tuning_here: bool = False) -> FarmContext:
    """Validate the target, detect the fingerprint, then open the registry (in that order,
    so that bad input is refused before anything is created). ``tuning_here``: also refuse a
    target whose instructions this CPU lacks (`FarmContext.check_local_tuning`)."""
    from foundation.hardware.targets import target_json
    from foundation.hardware.versions import tvm_version

    fingerprint, target = local_target(user_target, tuning_here=tuning_here)
    if tuning_here and create:  # a job here keeps its logs in FARM_HOME: one it cannot write is named now
        config.checked_data_dir(create=True)
    store = open_store(registry_option, create=create)
    return FarmContext(store, fingerprint, target, target_json(target), tvm_version())


def local_target(user_target: str, *, tuning_here: bool = False) -> tuple["Fingerprint", dict]:
    """This box's fingerprint for the target's kind, and the canonical target, checked as
    `open_context` checks it; no registry is opened."""
    from foundation.hardware.targets import canonical_target, check_llvm_cpu, check_runs_here, parse_target

    requested = parse_target(user_target)
    fingerprint = local_fingerprint(requested["kind"])
    target = canonical_target(user_target, fingerprint)
    check_llvm_cpu(requested, target)
    if tuning_here:
        check_runs_here(requested, target, fingerprint)
    return fingerprint, target
