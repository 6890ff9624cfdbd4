"""What the registry holds for each fingerprint: records, workloads, models, artifacts, cost models."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy import Table, distinct, func, select

from .schema import ArtifactRow, Base, FingerprintRow, JobRow, TuningRecordRow
from .session import UnitOfWork

# Cost models are kept per fingerprint in this table once the registry stores them (issue 17,
# item 3); until a migration creates it, a registry holds none.
COST_MODEL_TABLE = "cost_models"


@dataclass(frozen=True)
class FingerprintHoldings:
    id: str
    kind: str
    summary: str
    records: int  # tuning records (one per trace and scope; their measurements merged)
    valid_records: int  # of those, the ones with a valid measurement
    workloads: int  # workloads with a record on it
    models: int  # models submitted for it (tuned, or answered from the registry)
    artifacts: int  # intact libraries built for it
    cost_models: int | None  # None: this registry keeps no cost models yet

    def to_json(self) -> dict:
        return asdict(self)


class Holdings:
    """What the registry holds, counted (`RegistryStore.holdings`), over its unit of work."""

    def __init__(self, unit: UnitOfWork):
        self._unit = unit

    def per_fingerprint(self) -> list[FingerprintHoldings]:
        """Every fingerprint, oldest first, with what the registry holds for it (one grouped query a table)."""
        records = (select(TuningRecordRow.fingerprint_id, func.count(), func.count(TuningRecordRow.mean_sec),
                          func.count(distinct(TuningRecordRow.workload_id)))
                   .group_by(TuningRecordRow.fingerprint_id))
        models = select(JobRow.fingerprint_id, func.count(distinct(JobRow.model_id))).group_by(JobRow.fingerprint_id)
        artifacts = (select(ArtifactRow.fingerprint_id, func.count()).where(ArtifactRow.invalidated_at.is_(None))
                     .group_by(ArtifactRow.fingerprint_id))
        cost_table: Table | None = Base.metadata.tables.get(COST_MODEL_TABLE)
        with self._unit.read() as session:
            fingerprints = session.scalars(select(FingerprintRow).order_by(FingerprintRow.created_at)).all()
            by_records = {fp: (n, valid, w) for fp, n, valid, w in session.execute(records)}
            by_models = dict(session.execute(models).all())
            by_artifacts = dict(session.execute(artifacts).all())
            by_cost = None
            if cost_table is not None:
                by_cost = dict(session.execute(select(cost_table.c.fingerprint_id, func.count())
                                               .group_by(cost_table.c.fingerprint_id)).all())
            return [
                FingerprintHoldings(
                    id=fp.id, kind=fp.kind, summary=fp.summary,
                    records=by_records.get(fp.id, (0, 0, 0))[0], valid_records=by_records.get(fp.id, (0, 0, 0))[1],
                    workloads=by_records.get(fp.id, (0, 0, 0))[2], models=by_models.get(fp.id, 0),
                    artifacts=by_artifacts.get(fp.id, 0),
                    cost_models=None if by_cost is None else by_cost.get(fp.id, 0),
                )
                for fp in fingerprints
            ]
