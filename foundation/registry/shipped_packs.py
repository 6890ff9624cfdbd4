"""The packs tvm-farm ships: what the project tuned on the CPU kinds it was developed on.

A new registry loads them (`farm registry init`, the first `farm submit` that creates it; not
with `--cold`, nor with FARM_SHIPPED_PACKS=0; FARM_SHIPPED_PACKS_DIR names a team's own), so
the farm's first run on a known box kind starts from what was tuned there before: on a box
whose fingerprint a pack holds, its records are this fingerprint's (measured on this hardware)
and a submit reuses them; on a compatible or the nearest box they are seeds, measured here
first (foundation.meta_schedule.warm). Records stay under the fingerprint that measured them;
nothing is refiled.

A pack's header may also carry the timing context its CPU kind's A/B chose
(foundation.domain.timing_context.HardwareTiming, written by bench/pack_timing_context.py): a box of
that fingerprint times its candidates in it unless FARM_TIMING_CONTEXT says otherwise.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from foundation import config
from foundation.domain.timing_context import HardwareTiming
from foundation.errors import FarmError
from foundation.registry.packs import SUFFIX, read_pack, read_pack_header
from foundation.registry.schema import TuningRecordRow
from foundation.registry.store import RegistryStore
from foundation.registry.sync import SyncCounts, sync_registries

SHIPPED = Path(__file__).with_name("shipped")
# The key of a pack header's HardwareTiming.
TIMING_CONTEXT_KEY = "timing_context"
# The key of a pack header's A/Bs, one per context tried (bench/pack_timing_context.py). The one under
# TIMING_CONTEXT_KEY is the standing one of them, written out whole so that a reader (and a farm older
# than this list) applies no rule.
TIMING_CONTEXTS_TRIED_KEY = "timing_contexts_tried"


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


def shipped_hardware_timing(fingerprint_id: str, directory: Path | None = None) -> HardwareTiming | None:
    """The timing context the shipped pack of ``fingerprint_id`` carries; None where no pack of it does
    (nor where packs are not wanted: FARM_SHIPPED_PACKS=0). A pack whose header does not read counts
    as none: its rows are checked where it is loaded."""
    if directory is None and not config.shipped_packs_wanted():
        return None
    for path in shipped_packs(directory):
        try:
            header = read_pack_header(path)
        except FarmError:
            continue
        if header.get("fingerprint") == fingerprint_id and TIMING_CONTEXT_KEY in header:
            return HardwareTiming.from_json(header[TIMING_CONTEXT_KEY])
    return None
