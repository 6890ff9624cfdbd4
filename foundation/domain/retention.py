"""Which stored libraries a prune deletes and which it keeps, and why (pure: no SQL, no clock).

An artifact is kept when it is pinned, when an unfinished job made it or points at it, when it
is the one a registry hit answers with now (the newest valid one of its scope and TVM version,
as `RegistryStore.find_artifact` picks it), or when it is among the newest ``keep`` intact ones
of its scope (model, fingerprint, target, weights layout). An invalidated (corrupt) artifact is
never a hit and counts toward no scope's newest: unless pinned or in use, it goes, and first.
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from foundation.domain.request_limits import Bound

DEFAULT_KEEP = 3
# A scope holding more than a thousand libraries kept on purpose is a mistyped number.
KEEP = Bound(1, 1_000)
# A century: beyond it the cut-off date would fall before any date a registry can hold.
OLDER_THAN_DAYS = Bound(0, 36_500)


class Kept(str, enum.Enum):
    """Why an artifact stays, the first that applies in this order."""

    PINNED = "pinned"
    IN_USE = "in use by an unfinished job"
    HIT = "the registry hit of its scope"
    NEWEST = "among the newest of its scope"


class Doomed(str, enum.Enum):
    """Why an artifact goes."""

    INVALIDATED = "invalidated"
    SUPERSEDED = "older than the newest of its scope"


@dataclass(frozen=True)
class StoredLibrary:
    """What the rule needs to know of one stored artifact (no bytes)."""

    id: str
    model_id: str
    fingerprint_id: str
    target: str
    weights_layout: str
    tvm_version: str
    created_at: datetime
    size: int
    validation_passed: bool
    invalidated: bool
    pinned: bool
    in_use: bool

    @property
    def scope(self) -> tuple[str, str, str, str]:
        return (self.model_id, self.fingerprint_id, self.target, self.weights_layout)

    @property
    def hit_scope(self) -> tuple[str, str, str, str, str]:
        return (*self.scope, self.tvm_version)

    @property
    def newest_first(self) -> tuple[datetime, str]:
        # The registry's own order (created_at, then id, both descending): ties fall as a hit's do.
        return (self.created_at, self.id)


@dataclass(frozen=True)
class Deletion:
    library: StoredLibrary
    why: Doomed


@dataclass(frozen=True)
class RetentionPlan:
    """The artifacts to delete, in the order to delete them, and how many stay for each reason."""

    deletions: list[Deletion]
    kept: dict[Kept, int]

    @property
    def bytes(self) -> int:
        return sum(d.library.size for d in self.deletions)


def plan_retention(libraries: Iterable[StoredLibrary], keep: int) -> RetentionPlan:
    """Which of ``libraries`` go, keeping the newest ``keep`` intact ones of each scope (see module)."""
    libraries = list(libraries)
    newest: dict[tuple, list[StoredLibrary]] = defaultdict(list)
    hits: dict[tuple, StoredLibrary] = {}
    for library in libraries:
        if library.invalidated:
            continue
        newest[library.scope].append(library)
        if library.validation_passed:
            best = hits.get(library.hit_scope)
            if best is None or library.newest_first > best.newest_first:
                hits[library.hit_scope] = library
    kept_newest = {lib.id for scope in newest.values()
                   for lib in sorted(scope, key=lambda lib: lib.newest_first, reverse=True)[:keep]}
    hit_ids = {lib.id for lib in hits.values()}

    kept: Counter[Kept] = Counter()
    deletions: list[Deletion] = []
    for library in libraries:
        reason = _kept(library, hit_ids, kept_newest)
        if reason is not None:
            kept[reason] += 1
        else:
            deletions.append(Deletion(library, Doomed.INVALIDATED if library.invalidated else Doomed.SUPERSEDED))
    # Corrupt ones first, then the oldest: a prune stopped part way has freed the least useful.
    deletions.sort(key=lambda d: (d.why is not Doomed.INVALIDATED, d.library.newest_first))
    return RetentionPlan(deletions, {reason: kept[reason] for reason in Kept})


def _kept(library: StoredLibrary, hit_ids: set[str], kept_newest: set[str]) -> Kept | None:
    if library.pinned:
        return Kept.PINNED
    if library.in_use:
        return Kept.IN_USE
    if library.id in hit_ids:
        return Kept.HIT
    if library.id in kept_newest:
        return Kept.NEWEST
    return None
