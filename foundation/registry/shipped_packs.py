"""The packs tvm-farm ships: what the project tuned on the CPU kinds it was developed on.

A new registry loads them (`farm registry init`, the first `farm submit` that creates it; not
with `--cold`, nor with FARM_SHIPPED_PACKS=0; FARM_SHIPPED_PACKS_DIR names a team's own), so
the farm's first run on a known box kind starts from what was tuned there before: on a box
whose fingerprint a pack holds, its records are this fingerprint's (measured on this hardware)
and a submit reuses them; on a compatible or the nearest box they are seeds, measured here
first (foundation.meta_schedule.warm). Records stay under the fingerprint that measured them;
nothing is refiled.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from foundation import config
from foundation.registry.packs import SUFFIX, read_pack
from foundation.registry.schema import TuningRecordRow
from foundation.registry.store import RegistryStore
from foundation.registry.sync import SyncCounts, sync_registries

SHIPPED = Path(__file__).with_name("shipped")


def shipped_packs(directory: Path | None = None) -> list[Path]:
    """The packs a new registry loads: ``directory``'s, else FARM_SHIPPED_PACKS_DIR's, else tvm-farm's."""
    return sorted((directory or config.shipped_packs_dir() or SHIPPED).glob(f"*{SUFFIX}"))


def is_new(store: RegistryStore) -> bool:
    """Whether the registry holds no tuning record yet (one indexed probe, whatever its size)."""
    with store.unit_of_work.read() as session:
        return session.scalar(select(TuningRecordRow.id).limit(1)) is None


def load_shipped_packs(store: RegistryStore, directory: Path | None = None) -> dict[str, SyncCounts]:
    """Sync every shipped pack into ``store``; what each added, by pack file name."""
    loaded = {}
    for path in shipped_packs(directory):
        pack, _header = read_pack(path)
        try:
            loaded[path.name] = sync_registries(pack, store)
        finally:
            pack.dispose()
    return loaded
