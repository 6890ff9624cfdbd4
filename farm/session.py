"""What every command resolves first: the registry, this box's fingerprint, the target.

Only commands that create data (`submit`, `coordinator`, `registry import`, `registry init`)
open the registry with ``create=True`` (foundation.registry.opening).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation import config
from foundation.hardware.targets import local_target, target_json, to_tvm_target

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from farm.submit_values import SubmitRequest
    from foundation.hardware.fingerprint import Fingerprint
    from foundation.job_driver.admission import AskedJob
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
        return to_tvm_target(self.target)


def open_context(registry_option: str | None, user_target: str, *, create: bool = False,
                 tuning_here: bool = False) -> FarmContext:
    """Validate the target, detect the fingerprint, then open the registry (in that order,
    so that bad input is refused before anything is created). ``tuning_here``: also refuse a
    target whose instructions this CPU lacks (foundation.hardware.targets.check_runs_here)."""
    from foundation.hardware.versions import tvm_version
    from foundation.registry.opening import open_store

    fingerprint, target = local_target(user_target, tuning_here=tuning_here)
    if tuning_here and create:  # a job here keeps its logs in FARM_HOME: one it cannot write is named now
        config.checked_data_dir(create=True)
    store = open_store(registry_option, create=create)
    return FarmContext(store, fingerprint, target, target_json(target), tvm_version())


def open_submit(request: "SubmitRequest") -> tuple[FarmContext, "AskedJob"]:
    """An embedded submit's context, and what it asks as typed values. Each value is checked before the
    registry is opened or made: the model first, then the job's spec, a target this CPU cannot tune, and a
    form of weights that target cannot take."""
    from foundation.hardware.versions import tvm_version
    from foundation.job_driver.admission import asked_job
    from foundation.job_driver.embedded_admission import embedded_spec, keyed_here
    from foundation.registry.opening import open_store

    key = keyed_here(request.model, request.batch)
    spec = embedded_spec(request)
    fingerprint, target = local_target(request.target, tuning_here=True)
    asked = asked_job(key, spec, target["kind"], request.fingerprint)
    config.checked_data_dir(create=True)  # a job here keeps its logs in FARM_HOME: one it cannot write is named now
    store = open_store(request.registry, create=True)
    return FarmContext(store, fingerprint, target, target_json(target), tvm_version()), asked
