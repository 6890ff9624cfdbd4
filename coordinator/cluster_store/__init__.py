"""ClusterStore: the distributed mode's registry writes (agents, plans, leases, events), one transaction each.

State changes of shards are decided by foundation.domain.shards and of jobs by foundation.domain.jobs;
this package only reads rows into those values and writes the result back with an UPDATE
guarded by the state (and attempt) it read, so two coordinators never both apply a change.

Lock order, so PostgreSQL transactions wait for each other instead of deadlocking: job rows
first (by id; most units of work touch one job), then its shard or validation rows (by id).
Every event insert holds its job row, which makes a job's events commit in sequence order
(see `JobEvents._append_event`), and is why the job comes first: cancelling or failing a job
locks its shards while holding it.

ClusterStore is composed of one part per module: agents, jobs, plans (tasks, shards and what
they mean for their job), leases (of shards), reports (records under leases), events and validations, over locking (the
unit of work and the row locks) and rows (the plain entities they return).
"""

from __future__ import annotations

from .agents import AGENT_ACTIVE, AGENT_LOST, AgentRoster
from .leases import ShardLeases
from .locking import AgentMismatch, UnknownAgent
from .reports import ReportedRecords
from .validations import ValidationLeases

__all__ = [
    "AGENT_ACTIVE",
    "AGENT_LOST",
    "AgentMismatch",
    "ClusterStore",
    "UnknownAgent",
]


class ClusterStore(AgentRoster, ShardLeases, ReportedRecords, ValidationLeases):
    """Agents, job plans, shard leases, job events and validations, over a RegistryStore."""
