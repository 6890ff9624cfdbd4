"""Which probes measured a box's device features, and which of two measurements a registry keeps.

The CPU's device features (foundation.hardware.device_features) are measured by probes whose
version they store under ``PROBE_KEY`` (none stored is version 1), and the load the box was under
as they ran under ``PROBE_LOAD_KEY``. Figures of older probes, and figures probed on a busy box, are
measured again where the box is at hand and quiet (its cached fingerprint), and give way to a
current, quiet probe's in a registry; otherwise the first stored stays (boxes of one fingerprint
measure slightly different figures, and no registration rewrites the row for that).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROBE_KEY = "probe_version"
# Bump it when a probe changes what it measures. 2: the peak on every core the process may use
# (1 timed one matmul on the BLAS's threads: one core in a farm process, OPENBLAS_NUM_THREADS=1).
# 3: a 512 matmul, not 256 (foundation.hardware.device_features: 256 read a quarter of one box's peak).
PROBE_VERSION = 3

# The box's load as its probes ran: runnable processes a core, averaged over the minute before. Above
# QUIET_LOAD other work held part of the cores and the peak reads low by that share (a Xeon probed
# during `pip install` read 126 GFLOP/s, 145 quiet; a Zen 3, 133 against 177).
PROBE_LOAD_KEY = "probe_load"
QUIET_LOAD = 0.3


def measured_by_current_probes(device: Mapping[str, Any]) -> bool:
    """Whether stored device features were measured by this code's probes (PROBE_VERSION)."""
    return probe_version(device) >= PROBE_VERSION


def probed_busy(device: Mapping[str, Any]) -> bool:
    """Whether the features were probed on a busy box (no load stored: not known to be)."""
    load = device.get(PROBE_LOAD_KEY)
    return isinstance(load, int | float) and not isinstance(load, bool) and load > QUIET_LOAD


def probed_quiet(device: Mapping[str, Any]) -> bool:
    """Whether the features were probed on a box known to be quiet."""
    load = device.get(PROBE_LOAD_KEY)
    return isinstance(load, int | float) and not isinstance(load, bool) and 0 <= load <= QUIET_LOAD


def probe_again(stored: Mapping[str, Any], load_now: float) -> bool:
    """Whether a box's cached features are measured again now, under ``load_now``: older probes'
    always, a busy box's once the box is quiet."""
    return not measured_by_current_probes(stored) or (probed_busy(stored) and load_now <= QUIET_LOAD)


def newer_measurement(stored: Mapping[str, Any], measured: Mapping[str, Any]) -> Mapping[str, Any]:
    """Which of two measurements of one fingerprint's device a registry keeps: ``stored``, unless
    ``measured`` comes from newer probes, or from the same probes on a quiet box where ``stored``'s
    box was busy."""
    if probe_version(measured) != probe_version(stored):
        return measured if probe_version(measured) > probe_version(stored) else stored
    return measured if probed_busy(stored) and probed_quiet(measured) else stored


def probe_version(device: Mapping[str, Any]) -> int:
    version = device.get(PROBE_KEY, 1)
    return version if isinstance(version, int) and not isinstance(version, bool) else 1
