"""ClusterStore: the distributed mode's registry writes (agents, plans, leases, events), one transaction each.

State changes of shards are decided by foundation.domain.shard_leases, of validations by
foundation.domain.validations and of jobs by foundation.domain.jobs; this package only reads
rows into those values (each row converts itself: foundation.registry.schema) and writes the
result back with an UPDATE guarded by the state (and attempt) it read, so two coordinators
never both apply a change: a lease's move, a shard's or a validation's, through the one
`guarded_update.update_lease`.

Lock order, so PostgreSQL transactions wait for each other instead of deadlocking: job rows
first (by id; most units of work touch one job), then its shard or validation rows (by id).
Every event insert holds its job row, which makes a job's events commit in sequence order
(see `EventLog.append_in`), and is why the job comes first: cancelling or failing a job
locks its shards while holding it.

One store per aggregate, each given the registry's unit of work and the stores it builds on:
agents (AgentStore), events (EventLog), jobs (JobStore), plans: tasks, shards and what they
mean for their job (PlanStore), leases of shards (LeaseStore), reports of records under
leases (ReportStore) and validations (ValidationStore), over locking (the rows locked in the
lock order). `ClusterStore` (store.py) holds them, and callers call the one whose aggregate
they change (`cluster.jobs.move_job`, `cluster.leases.claim_shards`).
"""

from __future__ import annotations

from .agents import AGENT_ACTIVE, AGENT_LOST
from .locking import AgentMismatch, UnknownAgent
from .store import ClusterStore

__all__ = [
    "AGENT_ACTIVE",
    "AGENT_LOST",
    "AgentMismatch",
    "ClusterStore",
    "UnknownAgent",
]
