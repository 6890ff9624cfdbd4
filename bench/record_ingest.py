"""Registry ingest: records a second through `add_tuning_records`, new ones and re-measured ones.

Usage: .venv/bin/python bench/record_ingest.py [--records N] [--batch B] [--url postgresql://...]

New records are the common report; re-measured ones (the same traces, other times) are what a
retune or an imported log brings, which the registry merges into the records it has. Each
pass runs on a fresh database (PostgreSQL by default, dropped afterwards; sqlite:///PATH works
too) and prints the median of --repeat runs.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from foundation.registry import NewRecord, RegistryStore

TARGET = '{"kind":"llvm"}'


def _fresh(url: str):
    if url.startswith("sqlite"):
        path = Path(tempfile.mkdtemp(prefix="farm-ingest-")) / "registry.db"
        return f"sqlite:///{path}", lambda: None
    admin = create_engine(make_url(url).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    name = f"farm_bench_{secrets.token_hex(6)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(url).set(drivername="postgresql+psycopg", database=name).render_as_string(False), drop


def _records(workloads: list[int], n: int, scale: float) -> list[NewRecord]:
    # A trace of realistic size (a few KB of JSON, as MetaSchedule's are).
    body = '["ffi", ' + ",".join(['{"k":"SamplePerfectTile","d":[4,8,2,1]}'] * 40)
    return [NewRecord(workload_id=workloads[i % len(workloads)], fingerprint_id="cpu-bench", target=TARGET,
                      tvm_version="0.27.0", trace=f'{body}, {i}]', run_secs=[1e-4 * (1 + i % 97) * scale] * 3,
                      software={"tvm": "0.27.0", "llvm": "17"}, job_id="job-bench")
            for i in range(n)]


def _rate(store: RegistryStore, records: list[NewRecord], batch: int) -> float:
    begin = time.perf_counter()
    for start in range(0, len(records), batch):
        store.records.add_tuning_records(records[start:start + batch])
    return len(records) / (time.perf_counter() - begin)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--url", default=os.environ.get("FARM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = parser.parse_args()
    new, again = [], []
    for _ in range(args.repeat):
        url, drop = _fresh(args.url)
        store = RegistryStore(url)
        try:
            store.upsert_fingerprint("cpu-bench", "cpu", "bench", {})
            workloads = [store.records.commit_workload(str(i), f'["{i}","bW9k"]') for i in range(20)]
            new.append(_rate(store, _records(workloads, args.records, 1.0), args.batch))
            again.append(_rate(store, _records(workloads, args.records, 1.5), args.batch))
            counts = store.counts()
        finally:
            store.dispose()
            drop()
    print(f"{args.records} records in batches of {args.batch} on {make_url(args.url).get_backend_name()}, "
          f"median of {args.repeat}:")
    for label, rates in (("new records", new), ("the same, re-measured", again)):
        runs = ", ".join(f"{r:.0f}" for r in rates)
        print(f"  {label:<22} {statistics.median(rates):8.0f} records/s  (runs: {runs})")
    print(f"  rows: {counts.get('tuning_records')} records, "
          f"{counts.get('tuning_measurements', 'no')} later measurements")


if __name__ == "__main__":
    main()
