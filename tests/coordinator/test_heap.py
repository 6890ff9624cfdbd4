"""The serving loop collects garbage a little at a time (coordinator.heap.PacedCollector)."""

from __future__ import annotations

import asyncio
import gc
import weakref


class Cycle:
    def __init__(self):
        self.me = self


def test_paced_passes_collect_cycles_and_reach_every_generation():
    generations: list[int] = []

    def seen(phase, info):
        if phase == "start":
            generations.append(info["generation"])

    async def main(freed: list):
        from coordinator.heap import PacedCollector

        collector = PacedCollector(asyncio.get_running_loop(), pace_s=0.001, middle_every=3, full_every=9)
        collector.start()
        for _ in range(50):
            garbage = Cycle()
            weakref.finalize(garbage, freed.append, 1)
            del garbage  # only a collection frees a cycle
            await asyncio.sleep(0.002)
        collector.stop()
        return collector.passes

    was_enabled = gc.isenabled()
    gc.disable()  # no automatic collection: whatever is freed, the paced passes freed
    gc.callbacks.append(seen)
    freed: list = []
    try:
        passes = asyncio.run(main(freed))
    finally:
        gc.callbacks.remove(seen)
        if was_enabled:
            gc.enable()
    assert passes >= 9
    assert len(freed) >= 45, f"only {len(freed)} of 50 cycles were collected"
    assert {0, 1, 2} <= set(generations), generations
    assert generations.count(0) > generations.count(1) > 0
