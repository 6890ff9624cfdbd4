"""Reports sized to the fleet's rate of records (coordinator.fleet.report_sizing)."""

from __future__ import annotations

import random

import pytest

from coordinator.fleet.report_sizing import MAX_RECORDS_PER_REPORT, WINDOW_S, ReportPolicy, ReportSize, ReportSizing


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fleet_reports(sizing: ReportSizing, clock: Clock, agents: int, records_per_agent_s: float,
                  seconds: float) -> None:
    """``agents`` agents each reporting its records once a second for ``seconds``."""
    for _ in range(int(seconds)):
        clock.now += 1.0
        for agent in range(agents):
            sizing.note(f"agent-{agent}", int(records_per_agent_s))


def test_a_small_farm_keeps_the_minimum():
    clock = Clock()
    sizing = ReportSizing(ReportPolicy(min_records=16, report_rate=100, min_within_s=10), clock=clock)
    assert sizing.size() == ReportSize(16, 10.0)  # nothing reported yet
    fleet_reports(sizing, clock, agents=10, records_per_agent_s=50, seconds=WINDOW_S)  # 500 records/s
    clock.now += 1.0
    assert sizing.size() == ReportSize(16, 10.0)


def test_a_fast_fleet_is_asked_for_larger_reports_and_a_longer_bound():
    clock = Clock()
    sizing = ReportSizing(ReportPolicy(min_records=16, report_rate=100, min_within_s=10), clock=clock)
    # 1,500 agents at 6 records/s: 9,000 records/s, so 90 records a report keep to 100 reports/s;
    # 1,500 agents reporting at least once in 15 s keep to 100 reports/s too.
    fleet_reports(sizing, clock, agents=1500, records_per_agent_s=6, seconds=WINDOW_S)
    clock.now += 1.0  # each report carries the second before it: the window spans 10 s
    assert sizing.size() == ReportSize(90, 15.0)


def test_a_fleet_that_just_started_is_sized_by_the_seconds_it_has_reported():
    clock = Clock()
    sizing = ReportSizing(ReportPolicy(min_records=16, report_rate=100, min_within_s=10), clock=clock)
    fleet_reports(sizing, clock, agents=1500, records_per_agent_s=6, seconds=3)
    clock.now += 1.0
    assert sizing.size().records == 90  # 3 s of reports at 9,000 records/s, not 27,000 / 10 s


def test_sizes_follow_the_fleet_down_and_stay_put_between_recomputations():
    clock = Clock()
    sizing = ReportSizing(ReportPolicy(min_records=16, report_rate=100, min_within_s=10), clock=clock)
    fleet_reports(sizing, clock, agents=1000, records_per_agent_s=6, seconds=WINDOW_S)
    clock.now += 1.0
    big = sizing.size()
    assert big.records == 60
    sizing.note("agent-0", 100_000)
    assert sizing.size() == big  # read with every answer: worked out again at most once a second
    clock.now += WINDOW_S + 1  # the fleet went quiet
    sizing.note("agent-0", 6)
    assert sizing.size() == ReportSize(16, 10.0)


def test_a_report_never_grows_past_the_cap():
    clock = Clock()
    sizing = ReportSizing(ReportPolicy(min_records=16, report_rate=1, min_within_s=10), clock=clock)
    fleet_reports(sizing, clock, agents=10, records_per_agent_s=100, seconds=WINDOW_S)
    clock.now += 1.0
    assert sizing.size().records == MAX_RECORDS_PER_REPORT


@pytest.mark.parametrize("kwargs", [{"min_records": 0}, {"report_rate": 0}, {"min_within_s": -1}, {"jitter": -0.1},
                                    {"jitter": 1.0}])
def test_nonsense_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        ReportPolicy(**kwargs)


def _fleet_of(agents: int, min_records: int = 16, jitter: float = 0.25, seed: int = 3):
    clock = Clock()
    sizing = ReportSizing(ReportPolicy(min_records=min_records, report_rate=100, min_within_s=10, jitter=jitter),
                          clock=clock, rng=random.Random(seed))
    fleet_reports(sizing, clock, agents=agents, records_per_agent_s=6, seconds=WINDOW_S)
    clock.now += 1.0
    return sizing


def test_each_agent_is_told_the_fleets_size_spread_so_that_agents_do_not_report_in_step():
    # coordinator.fleet.report_sizing.offer: agents measuring at one rate that are all told the same
    # size stay in step; sizes that differ from answer to answer keep them drifting apart.
    sizing = _fleet_of(agents=1000)
    fleet = sizing.size()
    assert fleet == ReportSize(60, 10.0)
    offers = [sizing.offer() for _ in range(2000)]
    records = [o.records for o in offers]
    assert min(records) >= 45 and max(records) <= 75, "at most 25% either way"
    assert len(set(records)) >= 25, "spread over the band, not a few values"
    assert abs(sum(records) / len(records) - 60) < 1.0, "the fleet's rate of reports is kept on average"
    assert min(records) < 50 and max(records) > 70, "both ends of the band are reached"
    withins = [o.within_s for o in offers]
    assert all(7.5 <= w <= 10.0 for w in withins), "a record never waits longer than the bound"
    assert len(set(withins)) > 1000
    assert sizing.size() == fleet, "the fleet's own size is not moved by what agents are told"


def test_a_spread_size_never_goes_under_the_minimum_or_over_the_cap():
    small = _fleet_of(agents=10)  # 60 records/s: the minimum of 16
    assert {o.records for o in (small.offer() for _ in range(500))} <= set(range(16, 21))
    clock = Clock()
    big = ReportSizing(ReportPolicy(min_records=16, report_rate=1, min_within_s=10), clock=clock, rng=random.Random(5))
    fleet_reports(big, clock, agents=10, records_per_agent_s=100, seconds=WINDOW_S)
    clock.now += 1.0
    assert {o.records for o in (big.offer() for _ in range(500))} <= set(range(384, MAX_RECORDS_PER_REPORT + 1))


def test_without_jitter_every_agent_is_told_the_fleets_size():
    sizing = _fleet_of(agents=1000, jitter=0.0)
    assert {sizing.offer() for _ in range(100)} == {ReportSize(60, 10.0)}
