"""The agent's three regions and their states (agent.state.machine moves them), what must hold
between them, and the errors of a move the table does not have or of regions that disagree."""

from __future__ import annotations

import enum
from typing import Protocol


class Registration(enum.Enum):
    UNREGISTERED = "unregistered"
    REGISTERING = "registering"  # a Register in flight, or waiting to be retried
    REGISTERED = "registered"
    REFUSED = "refused"


class Work(enum.Enum):
    NOT_STARTED = "not started"
    STARTING = "starting"  # the first registration
    STARTING_RPC_SERVER = "starting the RPC server"
    ASKING_VALIDATION = "asking for a validation"
    ASKING_SHARD = "asking for a shard"  # a LeaseShard held by the coordinator
    WAITING = "waiting"  # as the coordinator asked, or backing off after a failed call
    TUNING = "tuning"
    CLOSING_SHARD = "closing the shard"  # CompleteShard or FailShard in flight
    VALIDATING = "validating"
    AWAITING_REGISTRATION = "awaiting registration"  # a work call found this agent forgotten
    STOPPED = "stopped"


class Beat(enum.Enum):
    OFF = "off"
    SCHEDULED = "scheduled"
    IN_FLIGHT = "in flight"
    STOPPED = "stopped"


State = Registration | Work | Beat
REGION = {Registration: "registration", Work: "work", Beat: "beat"}


class InvalidTransition(RuntimeError):
    """The agent was asked to move between states the table does not link, or got an event its
    state does not expect."""


class InvalidState(RuntimeError):
    """`AgentState.validate_state` found the regions in a combination no run of events makes."""


class HoldsRegions(Protocol):
    """What broken_invariants reads of an agent's state (agent.state.machine.AgentState)."""

    registration: Registration
    work: Work
    beat: Beat
    agent_id: str
    stopping: bool
    lease: object | None


def broken_invariants(state: HoldsRegions) -> list[str]:
    """What does not hold between ``state``'s three regions and its lease, as every run of events
    leaves them (AgentState.validate_state raises on any)."""
    broken = []
    if not (isinstance(state.registration, Registration) and isinstance(state.work, Work)
            and isinstance(state.beat, Beat)):
        broken.append("a region holds a value that is not one of its states")
    if state.registration is Registration.REGISTERED and not state.agent_id:
        broken.append("registered without an agent id")
    if state.registration is Registration.REFUSED and not (
            state.stopping and state.work is Work.STOPPED and state.beat is Beat.STOPPED):
        broken.append("refused, but not stopped")
    if state.stopping and state.beat is not Beat.STOPPED:
        broken.append("stopping, but still beating")
    if state.work is Work.STOPPED and not state.stopping:
        broken.append("work stopped without a stop")
    if state.work in (Work.TUNING, Work.CLOSING_SHARD) and state.lease is None:
        broken.append(f"{state.work.value} without a lease")
    if state.lease is not None and state.work not in (Work.TUNING, Work.CLOSING_SHARD, Work.STOPPED):
        broken.append(f"a lease held while {state.work.value}")
    if state.beat in (Beat.SCHEDULED, Beat.IN_FLIGHT) and state.work in (
            Work.NOT_STARTED, Work.STARTING, Work.STARTING_RPC_SERVER):
        broken.append(f"beating while {state.work.value}: the RPC server is not started yet")
    return broken
