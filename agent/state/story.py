"""The state machine's log (after dask's worker story): an entry per event handled and per change
of state, bounded, and what of it concerns a shard, a stimulus, a region or a state."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from agent.state.events import CancelLeaseOrder, Event, Lease

# Entries the log keeps (the oldest go first): days of an agent's beats would fill any memory.
LOG_LENGTH = 1000


class Stimulus(NamedTuple):
    """The log's entry for an event handled: its kind, the shard it names (if any), its id."""

    event: str
    shard: str | None
    stimulus_id: str


class Transition(NamedTuple):
    """The log's entry for a change of state: the region, from and to, the shard held then (if
    any), the event that caused it, and the names of the instructions it returned."""

    region: str
    start: str
    finish: str
    shard: str | None
    stimulus_id: str
    instructions: tuple[str, ...]


def story(log: Iterable[Stimulus | Transition], *keys: str) -> list[Stimulus | Transition]:
    """The entries that name any of ``keys`` (a shard id, a stimulus id, a region, a state's value,
    an event's or an instruction's name), oldest first."""
    wanted = set(keys)
    return [entry for entry in log
            if wanted.intersection(entry)
            or (isinstance(entry, Transition) and wanted.intersection(entry.instructions))]


def shard_of(event: Event) -> str | None:
    """The shard an event names, for the log: its lease's, or a cancelled lease's."""
    lease = getattr(event, "lease", None)
    if isinstance(lease, Lease):
        return lease.shard_id
    for order in getattr(event, "orders", ()):
        if isinstance(order, CancelLeaseOrder):
            return order.lease.shard_id
    return None

