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
    builds on (Celery-bootstep style: a plan settles its job, a lease its plan); their calls
    are this object's, so callers hold one store as before.
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

        agents, events, jobs, plans, leases, reports, validations = (
            self.agents, self.events, self.jobs, self.plans, self.leases, self.reports, self.validations)
        self.register_agent = agents.register_agent
        self.heartbeat = agents.heartbeat
        self.record_heartbeats = agents.record_heartbeats
        self.mark_lost_agents = agents.mark_lost_agents
        self.get_agent = agents.get_agent
        self.list_agents = agents.list_agents
        self.agents_matching = agents.agents_matching

        self.append_event = events.append_event
        self.events_after = events.events_after
        self.last_event_sequence = events.last_event_sequence

        self.create_job = jobs.create_job
        self.attachable_job = jobs.attachable_job
        self.attach_or_create_job = jobs.attach_or_create_job
        self.queued_jobs_without_fingerprint = jobs.queued_jobs_without_fingerprint
        self.bind_job_fingerprint = jobs.bind_job_fingerprint
        self.move_job = jobs.move_job

        self.add_job_plan = plans.add_job_plan
        self.add_round = plans.add_round
        self.shards_of = plans.shards_of
        self.get_shard = plans.get_shard
        self.job_tasks = plans.job_tasks
        self.job_rollup = plans.job_rollup
        self.running_jobs_ready_to_build = plans.running_jobs_ready_to_build
        self.cancel_job = plans.cancel_job

        self.leases_of_agent = leases.leases_of_agent
        self.pending_work = leases.pending_work
        self.claim_shard = leases.claim_shard
        self.claim_shards = leases.claim_shards
        self.complete_shard = leases.complete_shard
        self.fail_shard = leases.fail_shard
        self.expire_leases = leases.expire_leases
        self.reconcile_leases = leases.reconcile_leases

        self.report_records = reports.report_records
        self.ingest_reports = reports.ingest_reports

        self.create_validation = validations.create_validation
        self.pending_validations = validations.pending_validations
        self.get_validation = validations.get_validation
        self.validation_library = validations.validation_library
        self.claim_validation = validations.claim_validation
        self.finish_validation = validations.finish_validation
        self.fail_validation = validations.fail_validation
        self.expire_validations = validations.expire_validations

    def __repr__(self) -> str:
        return f"ClusterStore({self.url!r})"
