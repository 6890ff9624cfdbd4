"""The TVM-log tests' registry: empty but for the fingerprint their records are filed under."""

from __future__ import annotations

import pytest

from foundation.registry import RegistryStore


@pytest.fixture
def store(registry_url):
    registry = RegistryStore(registry_url)
    registry.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
    yield registry
    registry.dispose()
