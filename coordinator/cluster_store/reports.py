"""Records reported under shard leases: many reports, one transaction, each kept or dropped alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from foundation.clock import utc_now
from foundation.domain.shard_leases import stale_reason
from foundation.domain.shards import Shard, ShardState
from foundation.registry.entities import NewRecord, RecordReport, ReportedBatch
from foundation.registry.schema import JobEventRow, JobRow, ShardRow
from foundation.registry.session import Changes, UnitOfWork
from foundation.registry.store import RegistryStore


class ReportStore:
    """Reports of measured records, which the coordinator commits in groups; the records go
    into the registry's tuning records (RegistryStore.insert_records_keyed_in)."""

    def __init__(self, unit: UnitOfWork, registry: RegistryStore):
        self._unit = unit
        self._registry = registry

    def report_records(
        self,
        shard_id: str,
        attempt: int,
        agent_id: str,
        records: Sequence[NewRecord],
        trials_done_delta: int | None = None,
    ) -> RecordReport:
        """Store measured records under a lease, if it is still the shard's current one.

        A stale attempt stores nothing. ``trials_done_delta`` defaults to the number of
        records (failed candidates are records too: errors are data).
        """
        trials = len(records) if trials_done_delta is None else trials_done_delta
        return self.ingest_reports([ReportedBatch(shard_id, attempt, agent_id, records, trials)])[0]

    def ingest_reports(
        self, batches: Sequence[ReportedBatch], now: datetime | None = None
    ) -> list[RecordReport]:
        """Reports of many leases in one transaction: per report, as `report_records` decides.

        One transaction for a group of reports is what lets the coordinator keep up with a
        thousand agents: its cost was per transaction, not per record. The locks are those
        of a single report (jobs, then shards, each by id), taken once for the group, and
        only after the records are written: a group's records take most of its transaction,
        and claims and completions of the same jobs, which lock those jobs too, waited for
        all of it (docs/benchmarks.md, "Coordinator at scale"). So the leases are judged
        first as they stand, the records of the reports they accept written, and then, under
        the locks, judged again: if a lease changed in between (expired, cancelled), the
        records are taken back and written again for the reports that still stand.
        """
        if not batches:
            return []
        now = now or utc_now()
        shard_ids = sorted({b.shard_id for b in batches})
        # Trials, records and events change no state a cache keeps.
        with self._unit.write(Changes.NO_STATE) as session:
            job_ids = sorted(set(session.scalars(select(ShardRow.job_id).where(ShardRow.id.in_(shard_ids)))))
            _, kept = _judged(batches, *self._report_leases(session, shard_ids, job_ids, lock=False))
            written = session.begin_nested()
            digests, inserted = self._insert_kept(session, kept)
            # A shard's job never changes: the same rows again, locked this time.
            leases, job_fingerprint = self._report_leases(session, shard_ids, job_ids, lock=True)
            verdicts, standing = _judged(batches, leases, job_fingerprint)
            if [index for index, _ in standing] == [index for index, _ in kept]:
                written.commit()
            else:
                written.rollback()
                kept = standing
                digests, inserted = self._insert_kept(session, kept)
            offset, counted = 0, set()
            shard_trials: dict[str, int] = {}
            job_trials: dict[str, int] = {}
            events = []
            for index, records in kept:
                batch = batches[index]
                mine = digests[offset : offset + len(records)]
                offset += len(records)
                # A record new to the registry counts as stored for the first report that had it.
                stored = sum(1 for d in dict.fromkeys(mine) if d in inserted and d not in counted)
                counted.update(mine)
                verdicts[index] = RecordReport(True, None, stored, len(records) - stored)
                job_id = leases[batch.shard_id].job_id
                if batch.trials:
                    shard_trials[batch.shard_id] = shard_trials.get(batch.shard_id, 0) + batch.trials
                    job_trials[job_id] = job_trials.get(job_id, 0) + batch.trials
                events.extend(
                    {"job_id": job_id, "kind": kind, "payload": payload, "created_at": now}
                    for kind, payload in batch.events
                )
            # The leases and jobs are locked (PostgreSQL) or the database is (SQLite): no guard.
            if shard_trials:
                session.connection().execute(
                    update(ShardRow)
                    .where(ShardRow.id == bindparam("shard"))
                    .values(trials_done=ShardRow.trials_done + bindparam("delta")),
                    [{"shard": s, "delta": d} for s, d in sorted(shard_trials.items())],
                )
                session.connection().execute(
                    update(JobRow)
                    .where(JobRow.id == bindparam("job"))
                    .values(trials_done=JobRow.trials_done + bindparam("delta")),
                    [{"job": j, "delta": d} for j, d in sorted(job_trials.items())],
                )
            if events:
                # Each job's row is held, so its events commit in sequence order (EventLog.append_in).
                session.connection().execute(insert(JobEventRow), events)
        return verdicts  # type: ignore[return-value]

    def _report_leases(self, session: Session, shard_ids: Sequence[str], job_ids: Sequence[str], *, lock: bool):
        """The reported shards' leases by shard id, and their jobs' fingerprints by job id;
        ``lock``: their rows locked, jobs then shards, each by id (the lock order)."""
        jobs = select(JobRow.id, JobRow.fingerprint_id).where(JobRow.id.in_(job_ids)).order_by(JobRow.id)
        shards = (
            select(ShardRow.id, ShardRow.job_id, ShardRow.state, ShardRow.attempt, ShardRow.agent_id)
            .where(ShardRow.id.in_(shard_ids))
            .order_by(ShardRow.id)
        )
        if lock:
            jobs, shards = jobs.with_for_update(key_share=True), shards.with_for_update()
        job_fingerprint = dict(session.execute(jobs).all())
        return {row.id: row for row in session.execute(shards)}, job_fingerprint

    def _insert_kept(self, session: Session, kept: list[tuple[int, list[NewRecord]]]):
        all_records = [record for _, records in kept for record in records]
        return self._registry.records.insert_records_keyed_in(session, all_records) if all_records else ([], set())


def _judged(batches: Sequence[ReportedBatch], leases, job_fingerprint: dict[str, str | None]):
    """Per report a rejection (RecordReport) or None for one that stands, and the records of
    those that stand by report index, each record with its lease's job."""
    verdicts: list[RecordReport | None] = []
    kept: list[tuple[int, list[NewRecord]]] = []
    for index, batch in enumerate(batches):
        reason = _rejection(batch, leases.get(batch.shard_id), job_fingerprint)
        if reason is not None:
            verdicts.append(RecordReport(False, reason, 0, 0))
            continue
        verdicts.append(None)
        job_id = leases[batch.shard_id].job_id
        kept.append((index, [r if r.job_id else replace(r, job_id=job_id) for r in batch.records]))
    return verdicts, kept


def _rejection(batch: ReportedBatch, lease, job_fingerprint: dict[str, str | None]) -> str | None:
    """Why a report keeps nothing, or None."""
    if lease is None:
        return f"shard {batch.shard_id} is unknown"
    view = Shard(lease.id, lease.job_id, (), 0.0, 0, ShardState(lease.state), lease.attempt, lease.agent_id)
    reason = stale_reason(view, batch.attempt, batch.agent_id)
    if reason is not None:
        return reason
    fingerprint = job_fingerprint.get(lease.job_id)
    foreign = sorted({r.fingerprint_id for r in batch.records} - {fingerprint})
    if foreign:
        return (f"records for fingerprint(s) {', '.join(foreign)} were reported under a lease of job "
                f"{lease.job_id}, which tunes for {fingerprint}; nothing was kept: report records "
                "measured on this agent's device")
    return None
