"""How near another fingerprint is to this one, for borrowing its tuning records as seeds (pure).

Records of another fingerprint are never hits and never build answers; they only seed a
search, measured here first. Which to try first: the same hardware at another size
(foundation.domain.compatible_fingerprints), then the same instruction-set features (the code
the schedules were tuned for runs the same way), then the same vendor and family, then any
box of the same architecture, then the rest. Within a tier, more shared features first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from foundation.domain.compatible_fingerprints import compatible, identity_of

SAME_FINGERPRINT = 0
COMPATIBLE = 1
SAME_FEATURES = 2
SAME_FAMILY = 3
SAME_ARCH = 4
OTHER = 5


def nearness_tier(own: Mapping[str, Any], other: Mapping[str, Any]) -> int:
    """The tier of ``other``'s details seen from ``own``'s (fingerprint details dicts)."""
    if identity_of(own) == identity_of(other):
        return SAME_FINGERPRINT
    if compatible(own, other):
        return COMPATIBLE
    if "compute_capability" in own or "compute_capability" in other:
        own_cc, other_cc = str(own.get("compute_capability", "")), str(other.get("compute_capability", ""))
        if own_cc and own_cc == other_cc:
            return SAME_FEATURES
        if own_cc.split(".")[0] == other_cc.split(".")[0] and own_cc:
            return SAME_FAMILY
        return SAME_ARCH if own_cc and other_cc else OTHER
    if own.get("arch") != other.get("arch"):
        return OTHER
    if sorted(own.get("features", ())) == sorted(other.get("features", ())):
        return SAME_FEATURES
    same_vendor = own.get("vendor") is not None and own.get("vendor") == other.get("vendor")
    if same_vendor and own.get("x86_family") == other.get("x86_family"):
        return SAME_FAMILY
    return SAME_ARCH


def nearness(own: Mapping[str, Any], other: Mapping[str, Any]) -> tuple[int, float]:
    """A sort key, nearest first: the tier, then the share of features not in common."""
    mine, theirs = set(own.get("features", ())), set(other.get("features", ()))
    union = mine | theirs
    unshared = len(mine ^ theirs) / len(union) if union else 0.0
    return nearness_tier(own, other), unshared


def nearest_first(own_id: str, own: Mapping[str, Any],
                  others: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Fingerprint ids of ``others`` (id -> details), this one first, then nearest first."""
    return sorted(others, key=lambda fp: (fp != own_id, nearness(own, others[fp]), fp))
