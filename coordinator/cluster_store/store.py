"""ClusterStore: the one object callers hold, composing the cluster's stores over one unit of work."""

from __future__ import annotations

from foundation.registry.store import RegistryStore

from .agents import AgentStore
from .events import EventLog
from .jobs import JobStore
from .leases import LeaseStore
from .locking import RowLocks
from .plans import PlanStore
from .reports import ReportStore
from .validations import ValidationStore


class ClusterStore:
    """Agents, job plans, shard leases, job events, reports and validations, over a RegistryStore.

    Each aggregate has a store of its own, given the registry's unit of work and the stores it
    builds on (Celery-bootstep style: a plan settles its job, a lease its plan). Callers hold this
    one object and call the store of the aggregate they change: ``cluster.jobs.move_job``.
    """

    def __init__(self, store: RegistryStore):
        unit = store.unit_of_work
        postgres = store.dialect == "postgresql"
        self.url = store.url
        locks = RowLocks(store.url)
        self.agents = AgentStore(unit, postgres=postgres)
        self.events = EventLog(unit, locks, postgres=postgres)
        self.jobs = JobStore(unit, locks, self.events)
        self.validations = ValidationStore(unit, locks)
        self.plans = PlanStore(unit, store, locks, self.jobs, self.events, self.validations)
        self.leases = LeaseStore(unit, locks, self.plans, self.events)
        self.reports = ReportStore(unit, store)

    def __repr__(self) -> str:
        return f"ClusterStore({self.url!r})"
