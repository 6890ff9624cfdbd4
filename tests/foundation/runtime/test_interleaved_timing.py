"""A model and its reference timed in alternating blocks: each block runs both, the one going first alternates."""

from foundation.runtime.interleaved_timing import time_interleaved


def test_blocks_alternate_which_goes_first_after_warming_both_up():
    calls: list[str] = []

    def timer(name: str, ms: float):
        def one() -> float:
            calls.append(name)
            return ms
        return one

    mine, theirs = time_interleaved(timer("model", 2.0), timer("reference", 3.0), blocks=3, runs=2, warmup=1)
    assert mine == [[2.0, 2.0]] * 3 and theirs == [[3.0, 3.0]] * 3
    assert calls == ["model", "reference",  # warm-up
                     "model", "model", "reference", "reference",
                     "reference", "reference", "model", "model",
                     "model", "model", "reference", "reference"]


def test_a_latency_goal_times_the_model_alone():
    mine, theirs = time_interleaved(lambda: 1.5, None, blocks=2, runs=3, warmup=0)
    assert mine == [[1.5] * 3] * 2 and theirs is None


def test_a_reference_of_another_speed_takes_its_own_runs_per_block():
    mine, theirs = time_interleaved(lambda: 0.01, lambda: 40.0, blocks=2, runs=4, warmup=0, reference_runs=1)
    assert mine == [[0.01] * 4] * 2 and theirs == [[40.0]] * 2


def test_the_timing_ends_at_the_first_block_that_decides():
    seen: list[int] = []

    def enough(mine: list[list[float]], theirs: list[list[float]]) -> bool:
        assert len(mine) == len(theirs)  # asked after whole blocks
        seen.append(len(mine))
        return len(mine) == 2

    mine, theirs = time_interleaved(lambda: 1.0, lambda: 30.0, blocks=5, runs=3, warmup=0,
                                    reference_runs=1, enough=enough)
    assert seen == [1, 2] and mine == [[1.0] * 3] * 2 and theirs == [[30.0]] * 2
    never, _ = time_interleaved(lambda: 1.0, lambda: 30.0, blocks=5, runs=1, warmup=0, enough=lambda m, t: False)
    assert len(never) == 5
