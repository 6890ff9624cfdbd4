"""Answers that come in bursts, let out a few per pass of the event loop.

A group commit answers its requests at once (coordinator.fleet.group_commit), and each handler
then resumes on the serving process's event loop, in the order asyncio scheduled them. A
`LoopPacer` lets ``per_pass`` of them through per pass of the loop, in order; between passes
the loop polls for new calls, so a call arriving meanwhile (a heartbeat) waits behind a few
answers, not a group's worth. The total work is the same.
"""

from __future__ import annotations

import asyncio
from collections import deque


class LoopPacer:
    """At most ``per_pass`` callers of `turn` go on in one pass of the running loop; the
    others wait, in order, for later passes. Use from the loop's own thread only."""

    def __init__(self, per_pass: int):
        if per_pass < 1:
            raise ValueError("per_pass must be at least 1")
        self.per_pass = per_pass
        self._let_through = 0  # in this pass
        self._waiting: deque[asyncio.Future] = deque()
        self._next_pass_scheduled = False

    async def turn(self) -> None:
        if not self._waiting and self._let_through < self.per_pass:
            self._let_through += 1
            self._schedule_next_pass()
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        self._schedule_next_pass()
        await waiter

    def waiting(self) -> int:
        return len(self._waiting)

    def _schedule_next_pass(self) -> None:
        # call_soon runs it after what is already scheduled and after the loop's next poll
        # for I/O, which is what lets calls that arrived meanwhile go first.
        if not self._next_pass_scheduled:
            self._next_pass_scheduled = True
            asyncio.get_running_loop().call_soon(self._next_pass)

    def _next_pass(self) -> None:
        self._next_pass_scheduled = False
        self._let_through = 0
        while self._waiting and self._let_through < self.per_pass:
            waiter = self._waiting.popleft()
            if not waiter.done():  # a caller whose call was cancelled meanwhile is skipped
                waiter.set_result(None)
                self._let_through += 1
        if self._let_through:
            self._schedule_next_pass()
