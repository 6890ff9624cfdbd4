"""Artifact commits, the step the embedded and the distributed job share, and an artifact as it is shown.

Both modes must keep a validated library in exactly the same way, or a library tuned by one would not be
found (or would be described differently) by the other (its lookup: foundation.job_driver.hits).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from foundation.domain.weights_layout import WeightsLayout

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.untuned_speed import SpeedCheck
    from foundation.registry.entities import Artifact
    from foundation.registry.store import RegistryStore
    from foundation.runtime.library_runner import Latency
    from foundation.runtime.validation import ValidationResult

# Libraries are exported as shared objects (foundation.compile.build_library).
LIBRARY_FORMAT = "so"


def commit_artifact(
    store: "RegistryStore",
    *,
    model_id: str,
    target_json: str,
    fingerprint_id: str,
    job_id: str,
    library: bytes,
    latency: "Latency",
    untuned_latency: "Latency | None",
    validation: "ValidationResult",
    tvm_version: str,
    software: dict[str, Any],
    weights_layout: WeightsLayout,
    speed: "SpeedCheck | None" = None,
) -> "Artifact":
    """Keep a library that passed validation, with its latency, the check it passed (and how it
    timed against the untuned build, in its validation's ``speed``) and the form its weights take."""
    return store.add_artifact(
        model_id=model_id, target=target_json, fingerprint_id=fingerprint_id, job_id=job_id,
        library=library, lib_format=LIBRARY_FORMAT,
        latency={"mean_ms": latency.mean_ms, "median_ms": latency.median_ms, "std_ms": latency.std_ms},
        untuned_latency_mean_ms=untuned_latency.mean_ms if untuned_latency else None,
        validation={**validation.to_json(), **({"speed": speed.to_json()} if speed else {})},
        tvm_version=tvm_version, software=software,
        weights_layout=WeightsLayout(weights_layout).value,
    )


def artifact_json(artifact: "Artifact") -> dict:
    """An artifact as `farm submit --json` (and the coordinator's clients) show it."""
    return {
        "id": artifact.id,
        "job_id": artifact.job_id,  # the job that tuned it
        "sha256": artifact.sha256,
        "size": artifact.size,
        "latency_ms": {
            "mean": artifact.latency_mean_ms,
            "median": artifact.latency_median_ms,
            "std": artifact.latency_std_ms,
        },
        "untuned_latency_ms": artifact.untuned_latency_mean_ms,
        "validation": artifact.validation,
        # Loud on purpose: a stored library slower than the untuned build, or the untuned build kept instead.
        "slower_than_untuned": bool((artifact.speed or {}).get("slower_than_untuned")),
        "speed": artifact.speed,
        "tvm_version": artifact.tvm_version,
        "weights_layout": artifact.weights_layout,
        "created_at": artifact.created_at.isoformat() if artifact.created_at else None,
    }
