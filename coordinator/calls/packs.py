"""Packs in and out of the coordinator's registry: `farm registry sync` with a coordinator on
either side (FarmClient.ExportPack, ImportPack). No gRPC here: files and plain values.

A pack is the one format both directions speak (foundation.registry.packs): what leaves is a
sync of the registry into an in-memory one, written as a pack file and read out in chunks;
what arrives is spooled to a file, checked whole (every table's digest) and only then synced
into the registry, so a damaged or cut-short upload changes nothing. Either way the bytes pass
through a file in the coordinator's data directory, never whole through memory. A record that
arrives poisoned (times no kernel takes, a trace that does not replay on its workload) is refused
as a reported one is: not stored, counted in the answer and logged.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO

from foundation.clock import utc_now
from foundation.errors import BadInput
from foundation.registry.packs import in_memory_registry, read_pack, write_pack
from foundation.registry.store import RegistryStore
from foundation.registry.sync import SyncCounts, SyncFilter, sync_registries

logger = logging.getLogger("farm.coordinator")

CHUNK_BYTES = 1 << 20
# The largest pack the coordinator takes in: records and cost models of a whole fleet fit many
# times over; a registry with many libraries is synced in parts (--fingerprint, --model).
MAX_IMPORT_BYTES = 4 << 30


class PackFile:
    """A pack file in its own temporary directory, removed by ``close``."""

    def __init__(self, spool: Path, name: str):
        spool.mkdir(parents=True, exist_ok=True)
        self._directory = Path(tempfile.mkdtemp(dir=spool))
        self.path = self._directory / name
        self._stream: BinaryIO | None = None
        self.size = 0

    def read(self) -> bytes:
        """The next chunk of the pack, b"" at its end."""
        if self._stream is None:
            self._stream = self.path.open("rb")
        return self._stream.read(CHUNK_BYTES)

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > MAX_IMPORT_BYTES:
            raise BadInput(f"the pack is over the {MAX_IMPORT_BYTES >> 30} GiB a coordinator takes in",
                           "sync it in parts: --fingerprint, --model, or --no-artifacts")
        if self._stream is None:
            self._stream = self.path.open("wb")
        self._stream.write(chunk)

    def written(self) -> None:
        """Done writing: what was written is on disk for reading back."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        self.written()
        shutil.rmtree(self._directory, ignore_errors=True)


class PackCalls:
    def __init__(self, store: RegistryStore, *, data_dir: Path, about: dict):
        self._store = store
        self._spool = Path(data_dir) / "packs"
        self._about = about  # who writes the packs it exports: this coordinator

    def export(self, only: SyncFilter) -> PackFile:
        """The registry's rows ``only`` takes, as a pack file to read out (and close)."""
        pack, out = in_memory_registry(), PackFile(self._spool, "export.farmpack")
        try:
            sync_registries(self._store, pack, only)
            write_pack(pack, out.path, {**self._about, "created": utc_now().isoformat()})
        except BaseException:
            out.close()
            raise
        finally:
            pack.dispose()
        return out

    def receive(self) -> PackFile:
        """A file to spool an incoming pack into, then `import_` it."""
        return PackFile(self._spool, "import.farmpack")

    def import_(self, received: PackFile) -> SyncCounts:
        """Check the spooled pack whole, then sync it into the registry, each record checked."""
        from foundation.meta_schedule.database.record_replay import ArrivingRecordCheck

        received.written()
        pack, _header = read_pack(received.path)
        try:
            counts = sync_registries(pack, self._store, check=ArrivingRecordCheck())
        finally:
            pack.dispose()
        refused = counts.skipped.get("refused_records", 0)
        if refused:
            logger.warning("an imported pack held %d record(s) that were refused; the first: %s",
                           refused, counts.refused_reason)
        return counts
