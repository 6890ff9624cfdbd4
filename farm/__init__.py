"""tvm-farm: shared, incremental tuning for Apache TVM.

The Python API: ``farm.submit``, ``farm.status`` and ``farm.jobs`` run and follow jobs (embedded,
or through a coordinator), returning ``farm.Job`` values; ``farm.load`` loads a tuned library.
Each is imported when first used, so `import farm` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Where each public name lives.
_EXPORTS = {
    "load": "farm.api",
    "DeployedModel": "farm.api",
    "submit": "farm.job_api",
    "status": "farm.job_api",
    "jobs": "farm.job_api",
    "cancel": "farm.job_api",
    "Job": "farm.job_document",
    "JobArtifact": "farm.job_document",
    "Latency": "farm.job_document",
    "Coordinator": "farm.connection",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'farm' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
