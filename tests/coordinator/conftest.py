"""Fixtures of the coordinator's tests."""

from __future__ import annotations

import pytest

from coordinator.cluster_store import ClusterStore

from support.cluster_rows import GPU, OTHER_GPU
from support.coordinator_service import fingerprint, start  # noqa: F401  (the service tests' coordinator)


@pytest.fixture
def cluster_store(store) -> ClusterStore:
    """A ClusterStore over an empty registry with two GPU fingerprints and a model to plan jobs of."""
    store.upsert_fingerprint(GPU, "cuda", "test gpu", {})
    store.upsert_fingerprint(OTHER_GPU, "cuda", "other gpu", {})
    store.upsert_model(
        model_id="model-1", name="mlp", source="zoo", source_digest="v1", batch=1,
        inputs=[], weights=[], num_parameters=1,
    )
    return ClusterStore(store)
