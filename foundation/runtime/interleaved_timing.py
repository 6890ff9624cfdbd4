"""A model and its reference timed in alternating blocks, so load that comes and goes lands on both."""

from __future__ import annotations

from collections.abc import Callable

# One call, synchronised, returning its wall time in ms.
Timer = Callable[[], float]


# Given both sides' runs by block so far: whether the blocks still to come can be skipped.
Enough = Callable[[list[list[float]], list[list[float]]], bool]


def time_interleaved(candidate: Timer, reference: Timer | None, blocks: int, runs: int,
                     warmup: int = 2, reference_runs: int | None = None,
                     enough: Enough | None = None) -> tuple[list[list[float]], list[list[float]] | None]:
    """``blocks`` blocks of ``runs`` calls of each (of the reference ``reference_runs``, when its calls take
    another time), the one going first alternating per block (A B, B A, ...) so neither always runs on
    the other's heels; returns each one's runs by block. With ``enough``, asked after every block,
    the timing ends early once it says the runs so far decide."""
    for _ in range(warmup):
        candidate()
        if reference is not None:
            reference()
    mine: list[list[float]] = []
    theirs: list[list[float]] | None = None if reference is None else []
    for block in range(blocks):
        order = [(candidate, mine, runs), (reference, theirs, runs if reference_runs is None else reference_runs)]
        if block % 2:
            order.reverse()
        for timer, into, count in order:
            if timer is not None and into is not None:
                into.append([timer() for _ in range(count)])
        if enough is not None and theirs is not None and enough(mine, theirs):
            break
    return mine, theirs
