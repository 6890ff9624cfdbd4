"""Packs: what a registry knows, as one portable, reviewable file (TopHub's successor).

A pack is gzip-compressed JSON lines. The first line is its header: the format, who made it
(the command, the CPU, the date), the TVM version, and for each table its row count and the
sha256 of its lines; every other line is one row, ``{"table": ..., "row": {...}}`` (bytes as
base64, times as ISO 8601). `zcat PACK | head` shows what it holds.

Reading and writing go through an in-memory registry and `foundation.registry.sync`: a pack is
written by syncing into an empty in-memory registry and dumping it, and read by loading it into
one, checking every digest, and syncing from there. So a pack carries exactly what a sync
carries, filtered the same way, and a damaged pack is refused before anything is written.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime, LargeBinary, select
from sqlalchemy.exc import SQLAlchemyError

from foundation.errors import BadInput, FarmError, NotFound, path_error
from foundation.registry.schema import (
    ArtifactRow,
    Base,
    CostModelRow,
    FingerprintRow,
    JobRow,
    ModelRow,
    TuningMeasurementRow,
    TuningRecordRow,
    WorkloadRow,
)
from foundation.registry.session import Changes
from foundation.registry.store import RegistryStore

FORMAT = "tvm-farm-pack"
VERSION = 1
SUFFIX = ".farmpack"
# Header fields write_pack sets itself.
_OWN_HEADER = ("format", "version", "tables")
# Parents before children: a pack loads in this order.
TABLES: tuple[type[Base], ...] = (FingerprintRow, ModelRow, JobRow, WorkloadRow, TuningRecordRow,
                                  TuningMeasurementRow, CostModelRow, ArtifactRow)
_BY_NAME = {t.__tablename__: t for t in TABLES}


def is_pack(location: str) -> bool:
    return location.endswith(SUFFIX)


def in_memory_registry() -> RegistryStore:
    return RegistryStore("sqlite://")


def write_pack(store: RegistryStore, path: Path, about: dict[str, Any]) -> dict[str, Any]:
    """Dump ``store`` (an in-memory registry a sync filled) to ``path``, atomically; its header."""
    lines: dict[str, list[bytes]] = {}
    with store.unit_of_work.read() as session:
        for table in TABLES:
            columns = list(table.__table__.columns)
            rows = session.execute(select(*columns).order_by(*table.__table__.primary_key.columns))
            lines[table.__tablename__] = [
                json.dumps({"table": table.__tablename__, "row": {c.name: _plain(v) for c, v in zip(columns, row)}},
                           sort_keys=True, separators=(",", ":")).encode() for row in rows]
    header = {"format": FORMAT, "version": VERSION, **about,
              "tables": {name: {"rows": len(rows), "sha256": _digest(rows)} for name, rows in lines.items()}}
    path = Path(path)
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
        with os.fdopen(descriptor, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed:
            packed.write(json.dumps(header, sort_keys=True).encode() + b"\n")
            for rows in lines.values():
                for line in rows:
                    packed.write(line + b"\n")
        os.chmod(temporary, 0o644)  # a pack is for sharing; mkstemp's file is the owner's alone
        os.replace(temporary, path)
    except OSError as err:
        if "temporary" in locals():
            Path(temporary).unlink(missing_ok=True)
        raise path_error(err, path, doing="write the pack") from None
    return header


def read_pack(path: Path) -> tuple[RegistryStore, dict[str, Any]]:
    """An in-memory registry holding the pack at ``path``, and its header; BadInput for a pack that
    is damaged (a digest, a count or a line that does not match), NotFound for none there."""
    path = Path(path)
    with _reading(path) as packed:
        header = json.loads(packed.readline())
        lines: dict[str, list[bytes]] = {name: [] for name in _BY_NAME}
        for raw in packed:
            line = raw.rstrip(b"\n")
            lines.setdefault(json.loads(line).get("table"), []).append(line)
    _check_header(path, header, lines)
    store = in_memory_registry()
    try:
        with store.unit_of_work.write(Changes.STATE) as session:
            for name, table in _BY_NAME.items():
                rows = [_typed(table, json.loads(line)["row"]) for line in lines[name]]
                if rows:
                    session.execute(table.__table__.insert(), rows)
    except (FarmError, SQLAlchemyError, KeyError, TypeError, ValueError) as err:
        store.dispose()
        raise _damaged(path, f"its rows do not load ({type(err).__name__}: {str(err).splitlines()[0][:100]})") from None
    return store, header


def read_pack_header(path: Path) -> dict[str, Any]:
    """The header of the pack at ``path``, its first line alone (its rows unread and unchecked: what
    `read_pack` checks); BadInput for a file that is not a pack, NotFound for none there."""
    path = Path(path)
    with _reading(path) as packed:
        header = json.loads(packed.readline())
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _damaged(path, "its first line is not a tvm-farm pack header")
    return header


def header_about(header: dict[str, Any]) -> dict[str, Any]:
    """What a pack written again keeps of ``header``: all but the fields `write_pack` sets itself."""
    return {k: v for k, v in header.items() if k not in _OWN_HEADER}


@contextmanager
def _reading(path: Path) -> Iterator[gzip.GzipFile]:
    """The pack at ``path`` opened for reading, what goes wrong as it is read said as NotFound,
    BadInput (damaged) or the path's own error."""
    if not path.is_file():
        raise NotFound(f"no pack at {path}", f"a pack is a {SUFFIX} file written by `farm registry sync FROM PACK`")
    try:
        with gzip.open(path, "rb") as packed:
            yield packed
    except OSError as err:
        if isinstance(err, (gzip.BadGzipFile, EOFError)) or err.errno is None:
            raise _damaged(path, f"not a gzip file, or cut short ({err})") from None
        raise path_error(err, path, doing="read the pack") from None
    except (EOFError, zlib.error) as err:
        raise _damaged(path, f"cut short or corrupt ({err})") from None
    except (ValueError, AttributeError) as err:
        raise _damaged(path, f"a line is not a pack row ({str(err)[:80]})") from None


def _check_header(path: Path, header: Any, lines: dict[str, list[bytes]]) -> None:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _damaged(path, "its first line is not a tvm-farm pack header")
    if header.get("version") != VERSION:
        raise BadInput(f"{path} is a pack of format version {header.get('version')!r}; this tvm-farm reads "
                       f"version {VERSION}", "upgrade tvm-farm to read it, or write the pack again with this one")
    unknown = set(lines) - set(_BY_NAME)
    if unknown:
        raise _damaged(path, f"it has rows of tables a pack does not hold: {', '.join(sorted(map(str, unknown)))}")
    tables = header.get("tables")
    for name in _BY_NAME:
        expected = (tables or {}).get(name) or {}
        if expected.get("rows") != len(lines[name]) or expected.get("sha256") != _digest(lines[name]):
            raise _damaged(path, f"its {name} rows do not match the digest in its header")


def _damaged(path: Path, why: str) -> BadInput:
    return BadInput(f"the pack {path} is damaged: {why}; nothing was copied",
                    "fetch or write the pack again")


def _digest(lines: list[bytes]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line + b"\n")
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _typed(table: type[Base], row: dict[str, Any]) -> dict[str, Any]:
    typed = {}
    for column in table.__table__.columns:
        if column.name not in row and column.server_default is not None:
            continue  # a column newer than the pack (tuning_records.timing_context): the registry's default
        value = row.get(column.name)
        if value is not None and isinstance(column.type, LargeBinary):
            value = base64.b64decode(value["base64"])
        elif value is not None and _is_time(column):
            value = datetime.fromisoformat(value)
        typed[column.name] = value
    return typed


def _is_time(column: Any) -> bool:
    return isinstance(getattr(column.type, "impl", column.type), DateTime)
