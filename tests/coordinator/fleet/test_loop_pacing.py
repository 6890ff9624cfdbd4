"""A burst of answers goes out a few per pass of the event loop (coordinator.fleet.loop_pacing)."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.fleet.loop_pacing import LoopPacer


def test_a_call_arriving_during_a_burst_waits_behind_a_few_answers_not_all():
    async def main():
        pacer = LoopPacer(per_pass=4)
        passes = 0
        done: list[tuple[str, int]] = []  # (who, the loop pass it ran in)

        def count_passes():
            nonlocal passes
            passes += 1
            if len(done) < 41:
                asyncio.get_running_loop().call_soon(count_passes)

        async def answer(i: int):
            await pacer.turn()
            done.append((f"answer {i}", passes))

        async def heartbeat():
            done.append(("heartbeat", passes))

        asyncio.get_running_loop().call_soon(count_passes)
        answers = [asyncio.ensure_future(answer(i)) for i in range(40)]  # a group commit's answers, at once
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        beat = asyncio.ensure_future(heartbeat())  # arrives while the burst is being answered
        await asyncio.gather(*answers, beat)
        return done

    done = asyncio.run(main())
    order = [who for who, _ in done]
    # Unpaced, every answer would go before it: they were all ready first.
    assert order.index("heartbeat") <= 12, f"the heartbeat waited behind {order.index('heartbeat')} answers"
    answers = [(int(who.split()[1]), at) for who, at in done if who != "heartbeat"]
    assert [i for i, _ in answers] == list(range(40)), "answers keep their order"
    per_pass: dict[int, int] = {}
    for _, at in answers:
        per_pass[at] = per_pass.get(at, 0) + 1
    assert max(per_pass.values()) <= 4 and len(per_pass) >= 10


def test_a_cancelled_waiter_is_skipped_and_the_rest_go_on():
    async def main():
        pacer = LoopPacer(per_pass=1)
        went = []

        async def answer(i: int):
            await pacer.turn()
            went.append(i)

        tasks = [asyncio.ensure_future(answer(i)) for i in range(5)]
        await asyncio.sleep(0)
        assert pacer.waiting() == 4
        tasks[2].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return went

    assert asyncio.run(main()) == [0, 1, 3, 4]


def test_per_pass_must_be_positive():
    with pytest.raises(ValueError):
        LoopPacer(0)
