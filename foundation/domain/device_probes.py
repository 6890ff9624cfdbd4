"""Which probes measured a box's device features, and which of two measurements a registry keeps.

The CPU's device features (foundation.hardware.device_features) are measured by probes whose
version they store under ``PROBE_KEY`` (none stored is version 1). Figures of older probes are
measured again where the box is at hand (its cached fingerprint), and give way to a current
probe's in a registry; between measurements of one version the first stored stays (boxes of one
fingerprint measure slightly different figures, and no registration rewrites the row for that).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROBE_KEY = "probe_version"
# Bump it when a probe changes what it measures. 2: the peak on every core the process may use
# (1 timed one matmul on the BLAS's threads: one core in a farm process, OPENBLAS_NUM_THREADS=1).
PROBE_VERSION = 2


def measured_by_current_probes(device: Mapping[str, Any]) -> bool:
    """Whether stored device features were measured by this code's probes (PROBE_VERSION)."""
    return probe_version(device) >= PROBE_VERSION


def newer_measurement(stored: Mapping[str, Any], measured: Mapping[str, Any]) -> Mapping[str, Any]:
    """Which of two measurements of one fingerprint's device a registry keeps: ``stored``, unless
    ``measured`` comes from newer probes."""
    return measured if probe_version(measured) > probe_version(stored) else stored


def probe_version(device: Mapping[str, Any]) -> int:
    version = device.get(PROBE_KEY, 1)
    return version if isinstance(version, int) and not isinstance(version, bool) else 1
