"""The agent's decisions, apart from its I/O (after dask's worker_state_machine.py).

- `events`: what can happen to an agent (a registration answered, a heartbeat due, a shard
  leased or tuned, a call failed, a stop asked for).
- `instructions`: what it may be asked to do (register, send a heartbeat, ask for work, start
  or cancel a shard, wait, shut down).
- `states`: its three regions (registration, work, beat) and their states.
- `machine`: `AgentState`, which turns events into instructions through one table of
  transitions; no I/O, no clock. Its debugging aids, after dask's: a stimulus id on every
  event, a bounded log (`story`: its entries and what of it concerns a key), `story(*keys)`
  and `validate_state()`.
- `policy`: its timing rules (when a heartbeat is due, backoff, which failures pass).

`agent.daemon` carries the instructions out for a real box; the fake agents of the service
tests and of bench/coordinator_scale.py carry them out with fake I/O.
"""

from agent.state.machine import AgentState
from agent.state.policy import FULL_HEARTBEAT_EVERY, LEASE_WAIT_S, heartbeat_due
from agent.state.states import Beat, InvalidState, InvalidTransition, Registration, Work

__all__ = [
    "FULL_HEARTBEAT_EVERY",
    "LEASE_WAIT_S",
    "AgentState",
    "Beat",
    "InvalidState",
    "InvalidTransition",
    "Registration",
    "Work",
    "heartbeat_due",
]
