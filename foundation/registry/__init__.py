"""The registry: what the farm knows, in SQL (SQLite for one box, PostgreSQL for a farm)."""

from .entities import Artifact, Fingerprint, Job, Model, NewRecord, StoredRecord
from .migrate import upgrade_registry
from .store import RegistryStore

__all__ = [
    "Artifact",
    "Fingerprint",
    "Job",
    "Model",
    "NewRecord",
    "RegistryStore",
    "StoredRecord",
    "upgrade_registry",
]
