"""Which fingerprints are the same hardware at another size (pure).

A fingerprint's id keeps the core count and the cache share: schedules depend on how many
threads they split work over and on how much cache each thread sees, so records stay keyed
exactly. But a library tuned on a 4-CPU pod runs correctly, and close to its tuned speed, on an
8-CPU pod of the same CPU; and the 4-CPU pod's records are the best seeds the 8-CPU pod can
have. Two fingerprints are *compatible* when they differ only in such sizes: the same kind,
CPU model, code-generation features and LLVM view, and (for CUDA) the same device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Details that say how much of the hardware a process sees, not what hardware it is.
SIZE_DETAILS = frozenset({"cores", "l3_kib", "memory_gib"})
# Measured device features (foundation.hardware.device_features.DEVICE_KEY): not part of what the
# hardware is, and a little different on every box of it. Spelled here: the domain imports no hardware.
DEVICE_DETAILS = "device"


def identity_of(details: Mapping[str, Any]) -> dict[str, Any]:
    """``details`` without its measured device features: equal for the same fingerprint."""
    return {key: value for key, value in details.items() if key != DEVICE_DETAILS}


def hardware_of(details: Mapping[str, Any]) -> dict[str, Any]:
    """``details`` without its sizes and measurements: equal for compatible fingerprints."""
    return {key: value for key, value in identity_of(details).items() if key not in SIZE_DETAILS}


def compatible(own: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether ``other``'s details describe the same hardware as ``own``'s, at any size."""
    return hardware_of(own) == hardware_of(other)


def compatible_first(own_id: str, own: Mapping[str, Any],
                     others: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The ids of ``others`` (id -> details) compatible with ``own``, this one excepted: the one
    nearest in size first (fewest cores away, then more cores before fewer: a library tuned for
    more threads loses less on this box than one that leaves cores idle), ties by id."""
    own_cores = int(own.get("cores") or 0)

    def distance(fp: str) -> tuple[int, int, str]:
        cores = int(others[fp].get("cores") or 0)
        return abs(cores - own_cores), -cores, fp

    return sorted((fp for fp, details in others.items() if fp != own_id and compatible(own, details)), key=distance)
