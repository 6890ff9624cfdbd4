"""One table of legal state moves, for jobs, shards and validations alike (pure, no I/O).

Each kind writes its table once (foundation.domain.jobs, .shard_states, .validations); this
checks a move against it, says which states may reach a target (the guard of a bulk SQL
UPDATE), and which states are final (none leaves them).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

S = TypeVar("S", bound=enum.Enum)


class IllegalTransition(ValueError):
    """Something was asked to move to a state its current state cannot reach."""


class TransitionTable(Generic[S]):
    """The legal moves of one kind of thing: ``moves[state]`` are the states it may go to."""

    def __init__(self, noun: str, states: type[S], moves: Mapping[S, Iterable[S]],
                 illegal: type[IllegalTransition] = IllegalTransition):
        missing = set(states) - set(moves)
        if missing:
            raise ValueError(f"the {noun} transition table leaves out {sorted(s.value for s in missing)}")
        self._noun = noun
        self._states = states
        self._moves = {state: frozenset(targets) for state, targets in moves.items()}
        self._illegal = illegal

    def check(self, current: S | str, new: S | str) -> S:
        """Return ``new`` as a state if ``current -> new`` is legal, else raise."""
        current, new = self._states(current), self._states(new)
        if new not in self._moves[current]:
            raise self._illegal(f"{self._noun} cannot go from {current.value} to {new.value}")
        return new

    def allowed_sources(self, new: S | str) -> frozenset[S]:
        """The states from which a move to ``new`` is legal: the guard of a bulk SQL UPDATE."""
        new = self._states(new)
        return frozenset(state for state, targets in self._moves.items() if new in targets)

    def is_final(self, state: S | str) -> bool:
        """Whether no move leaves ``state``."""
        return not self._moves[self._states(state)]
