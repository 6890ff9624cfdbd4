"""Records read from a log, kept in a temporary file until they are written: a log of any size in bounded memory."""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator

from foundation.registry.entities import NewRecord

# Records held in memory at once, reading or writing: about 2 KB each in a JSONDatabase log.
BATCH = 500


class RecordSpool:
    """Appended to one record at a time, read back in batches of BATCH, in order, once.

    A log's records are all read and checked before any is written (a broken line leaves the
    registry untouched); the spool is where they wait, instead of a list as large as the log.
    """

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="farm-import-")
        self._pending: list[NewRecord] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, record: NewRecord) -> None:
        self._pending.append(record)
        self._count += 1
        if len(self._pending) >= BATCH:
            self._spill()

    def batches(self) -> Iterator[list[NewRecord]]:
        self._spill()
        self._file.seek(0)
        while True:
            try:
                yield pickle.load(self._file)
            except EOFError:
                return

    def close(self) -> None:
        self._file.close()

    def _spill(self) -> None:
        if self._pending:
            pickle.dump(self._pending, self._file, protocol=pickle.HIGHEST_PROTOCOL)
            self._pending = []
