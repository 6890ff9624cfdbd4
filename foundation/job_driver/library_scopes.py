"""Where a model's library may be found for this box: its own fingerprint, then compatible ones.

A library is stored under the fingerprint and target it was tuned for. A box of the same
hardware at another size (foundation.domain.compatible_fingerprints) runs it correctly: the
target's num-cores only shaped how the schedules split work, and the runtime's thread pool
takes this box's cores. So `farm run`, `farm.load` and a submit's hit lookup try this
fingerprint's scope first and then each compatible fingerprint's, nearest in size first; a
library found there says whose it is (``Artifact.fingerprint_id``), and a `--retune` here
stores one of this fingerprint's that is found first from then on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from foundation.domain.compatible_fingerprints import compatible, compatible_first
from foundation.errors import BadInput, NotFound
from foundation.hardware.targets import target_json as spelled

if TYPE_CHECKING:  # pragma: no cover
    from foundation.registry.store import RegistryStore


@dataclass(frozen=True)
class LibraryScope:
    """One (fingerprint, target) under which a library for this box may be stored."""

    fingerprint_id: str
    target_json: str

    def is_own(self, fingerprint_id: str) -> bool:
        return self.fingerprint_id == fingerprint_id


def library_scopes(store: "RegistryStore", target_json: str, fingerprint_id: str,
                   details: dict[str, Any], *, chosen: str | None = None,
                   known: dict[str, dict[str, Any]] | None = None) -> list[LibraryScope]:
    """This fingerprint's scope, then its compatible fingerprints' (nearest size first); only
    ``chosen``'s where one is named (``--fingerprint``), refused unless it is this hardware.
    ``known``: the registry's fingerprints (id -> details), where the caller has read them already."""
    if known is None:
        known = {f.id: f.details for f in store.list_fingerprints()}
    if chosen is not None:
        if chosen == fingerprint_id:
            return [LibraryScope(fingerprint_id, target_json)]
        if chosen not in known:
            raise NotFound(f"no fingerprint {_shown(chosen)} in the registry",
                           "`farm registry ls` lists the fingerprints it holds")
        if not compatible(details, known[chosen]):
            raise BadInput(f"fingerprint {_shown(chosen)} is other hardware than this box's ({fingerprint_id}): "
                           f"its libraries may not run here",
                           "name a fingerprint of this CPU at another size, or leave --fingerprint out")
        return [LibraryScope(chosen, _target_for(target_json, details, known[chosen]))]
    others = compatible_first(fingerprint_id, details, known)
    return [LibraryScope(fingerprint_id, target_json)] + [
        LibraryScope(fp, _target_for(target_json, details, known[fp])) for fp in others
    ]


def _target_for(target_json: str, own: dict[str, Any], other: dict[str, Any]) -> str:
    """``target_json`` as the farm spelled it for ``other``: the num-cores it filled in from the
    fingerprint becomes the other's; one the user set stays (it was never this box's size)."""
    target = json.loads(target_json)
    if target.get("kind") == "llvm" and target.get("num-cores") == own.get("cores") and other.get("cores"):
        target["num-cores"] = int(other["cores"])
    return spelled(target)


def _shown(value: str, limit: int = 80) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")
