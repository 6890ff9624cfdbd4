"""A library that auto runs on every core steps back to one thread while its calls say the cores
are taken, and tries every core again later, waiting longer while they stay taken."""

from foundation.runtime.busy_backoff import BUSY_SLOWDOWN, FIRST_BACKOFF_S, MOST_BACKOFF_S, SLOW_IN_A_ROW, BusyBackoff


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _slow_calls(backoff: BusyBackoff, count: int, ms: float = 200.0) -> None:
    for _ in range(count):
        backoff.ran(backoff.cores, ms)


def test_slow_calls_in_a_row_on_every_core_step_back_to_one_thread_until_a_try_is_fast():
    clock = Clock()
    backoff = BusyBackoff(cores=2, stored_latency_ms=1.0, clock=clock)
    _slow_calls(backoff, 1, 500.0)  # the first call allocates and loads: not a sign of a busy box
    assert backoff.threads() == 2
    backoff.ran(2, BUSY_SLOWDOWN * 1.0)  # as slow as allowed: still quiet
    _slow_calls(backoff, SLOW_IN_A_ROW - 1)
    assert backoff.threads() == 2
    _slow_calls(backoff, 1)
    assert backoff.threads() == 1
    backoff.ran(1, 6.0)  # calls on one thread say nothing about every core
    clock.now += FIRST_BACKOFF_S * 0.99
    assert backoff.threads() == 1
    clock.now += FIRST_BACKOFF_S * 0.02
    assert backoff.threads() == 2  # a try on every core
    backoff.ran(2, 1.1)
    assert backoff.threads() == 2 and backoff.backoff_s == FIRST_BACKOFF_S


def test_a_stray_slow_call_between_fast_ones_changes_nothing():
    backoff = BusyBackoff(cores=2, stored_latency_ms=1.0, clock=Clock())
    backoff.ran(2, 1.0)
    for _ in range(10):
        _slow_calls(backoff, SLOW_IN_A_ROW - 1)
        backoff.ran(2, 1.2)
        assert backoff.threads() == 2


def test_each_slow_try_doubles_the_wait_up_to_the_most():
    clock = Clock()
    backoff = BusyBackoff(cores=4, stored_latency_ms=2.0, clock=clock)
    backoff.ran(4, 2.0)
    _slow_calls(backoff, SLOW_IN_A_ROW - 1)
    waits = []
    for _ in range(12):
        assert backoff.threads() == 4
        _slow_calls(backoff, 1)  # the step back's first try, then each later try: one slow call each
        waits.append(backoff.backoff_s)
        assert backoff.threads() == 1
        clock.now += backoff.backoff_s
    assert waits[:4] == [FIRST_BACKOFF_S, 2 * FIRST_BACKOFF_S, 4 * FIRST_BACKOFF_S, 8 * FIRST_BACKOFF_S]
    assert waits[-1] == MOST_BACKOFF_S
