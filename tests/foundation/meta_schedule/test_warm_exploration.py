"""A warm search keeps exploring beyond its seeds: each batch's random share, and the seeds' share
of a task's trials."""

from __future__ import annotations

import pytest

from foundation.meta_schedule.planned_search import COLD_EXPLORATION, WARM_EXPLORATION, planned_search
from foundation.meta_schedule.tuner import explorations
from foundation.meta_schedule.warm import WarmStart, seeds_per_task
from foundation.meta_schedule.warm.seed_sources import SeedTrace


def _seed() -> SeedTrace:
    return SeedTrace(workload_json="{}", trace_json="[]", fingerprint_id="cpu-elsewhere", own=False,
                     mean_sec=1e-3, record_id=1)


def test_a_cold_search_explores_as_metaschedule_does():
    assert explorations(None, 3) == [COLD_EXPLORATION] * 3 == [0.05] * 3


def test_a_seeded_task_draws_a_quarter_of_each_batch_at_random_and_an_unseeded_one_does_not():
    warm = WarmStart(seeds=[[_seed()], [], [_seed()]])
    assert explorations(warm, 3) == [WARM_EXPLORATION, COLD_EXPLORATION, WARM_EXPLORATION]
    # Batches of 16: MetaSchedule truncates 16 x 0.05 to no random pick; a warm task gets 4.
    assert int(16 * WARM_EXPLORATION) == 4 and int(16 * COLD_EXPLORATION) == 0


def test_a_pretrained_cost_model_steers_every_task_so_every_task_explores():
    warm = WarmStart(seeds=[], cost_model=object())
    assert explorations(warm, 2) == [WARM_EXPLORATION, WARM_EXPLORATION]


def test_the_share_reaches_metaschedules_search_and_is_checked():
    assert planned_search([16], 0, WARM_EXPLORATION).inner.eps_greedy == pytest.approx(WARM_EXPLORATION)
    assert planned_search([16], 0).inner.eps_greedy == pytest.approx(COLD_EXPLORATION)
    with pytest.raises(ValueError, match="between 0 and 1"):
        planned_search([16], 0, 1.5)


@pytest.mark.parametrize("planned", [1, 2, 4, 8, 16, 32, 48, 64, 200])
def test_seeds_take_at_most_a_quarter_of_a_tasks_trials(planned):
    seeds = seeds_per_task(planned)
    assert seeds >= 1
    assert seeds <= max(1, planned // 4)
