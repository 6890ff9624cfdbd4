"""Which cache state a task's candidates are timed in: asked for, or chosen by its weights against the L2."""

from __future__ import annotations

import pytest

from foundation.domain.timing_context import (
    RECORD_CONTEXTS,
    BufferRoles,
    HardwareTiming,
    TimingContext,
    choose_among_trials,
    choose_hardware_timing,
    parse_timing_context,
    task_timing,
)
from foundation.errors import BadInput

# A dense task: activations (0), weights (1), bias (2), output (3).
DENSE = BufferRoles(weights=(1, 2), activations=(0,), outputs=(3,), sizes=(4096, 2 * 2**20, 2048, 4096))


def test_auto_flushes_the_weights_of_a_task_whose_weights_outgrow_the_l2():
    timing = task_timing(TimingContext.AUTO, DENSE, l2_kib=1024)
    assert timing.context is TimingContext.WEIGHTS and "exceed the L2 (1024 KiB)" in timing.why
    assert timing.to_json()["weights"] == [1, 2] and timing.to_json()["weight_bytes"] == 2 * 2**20 + 2048


def test_auto_times_a_task_whose_weights_fit_in_the_l2_warm():
    timing = task_timing(TimingContext.AUTO, DENSE, l2_kib=4096)
    assert timing.context is TimingContext.WARM and "fit in the L2" in timing.why
    assert task_timing(TimingContext.AUTO, DENSE, l2_kib=None).context is TimingContext.WARM


def test_l2_evicted_streams_twice_the_l2_or_8_mib_where_its_size_is_unknown():
    timing = task_timing(TimingContext.L2_EVICTED, DENSE, l2_kib=2048)
    assert timing.eviction_bytes == 4 * 2**20 and timing.to_json()["eviction_bytes"] == 4 * 2**20
    assert task_timing(TimingContext.L2_EVICTED, DENSE, l2_kib=None).eviction_bytes == 8 * 2**20
    weights = task_timing(TimingContext.WEIGHTS, DENSE, l2_kib=2048)
    assert weights.eviction_bytes == 0 and "eviction_bytes" not in weights.to_json()


@pytest.mark.parametrize("context", [c for c in TimingContext if c is not TimingContext.AUTO])
def test_a_context_asked_for_is_every_tasks(context):
    assert task_timing(context, DENSE, l2_kib=1).context is context


def test_only_the_flushing_contexts_time_a_call_a_repeat():
    assert {c for c in TimingContext if c.flushes} == {TimingContext.FLUSHED, TimingContext.WEIGHTS,
                                                       TimingContext.PRODUCER, TimingContext.L2_EVICTED}


def test_a_record_says_the_cache_state_it_was_timed_in_never_auto():
    assert RECORD_CONTEXTS == ("warm", "flushed", "weights", "producer", "l2-evicted")


def test_an_unknown_context_is_refused_naming_the_choices():
    assert parse_timing_context(" Auto ", "X") is TimingContext.AUTO
    with pytest.raises(BadInput) as err:
        parse_timing_context("cold", "FARM_TIMING_CONTEXT")
    assert "FARM_TIMING_CONTEXT='cold'" in str(err.value) and "weights" in err.value.fix


# Two CPU kinds' A/B pairs (auto's library time over warm's, docs/results/timing-context-auto-*.json).
ZEN5_RESNET = (0.865, 0.858, 0.692, 0.916, 1.019)
ZEN4_POOLED = (1.405, 1.190, 0.723, 1.048, 0.902, 1.057, 0.848, 0.750, 0.997)


def test_a_cpu_kind_whose_ab_beat_warm_in_median_and_most_pairs_chooses_the_context():
    chosen = choose_hardware_timing(TimingContext.AUTO, ZEN5_RESNET, ["ab.json"])
    assert chosen.context is TimingContext.AUTO and chosen.wins == 4 and chosen.median == pytest.approx(0.865)
    assert chosen.describe() == "auto: auto/warm 0.865 (median of 5 A/B tunes, 4 won)"


def test_a_cpu_kind_whose_ab_did_not_beat_warm_by_enough_keeps_warm_and_says_what_was_tried():
    chosen = choose_hardware_timing(TimingContext.AUTO, ZEN4_POOLED, ["a.json", "b.json"])
    assert chosen.context is TimingContext.WARM and chosen.tried is TimingContext.AUTO and chosen.wins == 5
    # A low median carried by a minority of pairs is not enough either.
    assert choose_hardware_timing(TimingContext.AUTO, (0.5, 0.6, 1.01, 1.02, 1.03), []).context is TimingContext.WARM
    assert choose_hardware_timing(TimingContext.AUTO, (0.96, 0.97, 0.98), []).context is TimingContext.WARM


def test_of_several_contexts_tried_the_best_winner_stands_and_a_later_loser_undoes_no_win():
    # The Xeon model 167's producer pairs (docs/results/timing-context-producer-*-xeon167-*.json).
    auto_won = choose_hardware_timing(TimingContext.AUTO, ZEN5_RESNET, ["auto.json"])
    producer_lost = choose_hardware_timing(TimingContext.PRODUCER, (0.8334, 1.136, 0.9605), ["producer.json"])
    assert producer_lost.context is TimingContext.WARM
    assert choose_among_trials([auto_won, producer_lost]) is auto_won
    assert choose_among_trials([producer_lost, auto_won]) is auto_won
    flushed_won_more = choose_hardware_timing(TimingContext.FLUSHED, (0.8, 0.82, 0.85), ["flushed.json"])
    assert choose_among_trials([auto_won, flushed_won_more, producer_lost]) is flushed_won_more
    # None won: warm, shown by the A/B that came closest.
    auto_lost = choose_hardware_timing(TimingContext.AUTO, (1.008, 1.052, 1.097), ["auto.json"])
    assert choose_among_trials([auto_lost, producer_lost]) is producer_lost
    with pytest.raises(ValueError):
        choose_among_trials([])


@pytest.mark.parametrize("ratios", [(0.8, 0.8), (0.8, 0.0, 0.8), (0.8, float("nan"), 0.8)])
def test_too_few_or_unusable_pairs_choose_nothing(ratios):
    with pytest.raises(BadInput, match="too few to choose a timing context"):
        choose_hardware_timing(TimingContext.AUTO, ratios, [])
    with pytest.raises(BadInput, match="warm against itself"):
        choose_hardware_timing(TimingContext.WARM, ZEN5_RESNET, [])


def test_a_hardware_timing_reads_back_from_its_json_and_an_unreadable_one_is_none():
    chosen = choose_hardware_timing(TimingContext.WEIGHTS, ZEN5_RESNET, ["ab.json"])
    assert HardwareTiming.from_json(chosen.to_json()) == HardwareTiming(
        TimingContext.WEIGHTS, TimingContext.WEIGHTS, tuple(round(r, 4) for r in ZEN5_RESNET), ("ab.json",))
    for unreadable in ({"context": "sometimes", "tried": "auto", "ratios": [1]}, {"context": "auto"}, None, "auto",
                       ["auto"], {"context": "auto", "tried": "auto", "ratios": []},
                       {"context": "auto", "tried": "auto", "ratios": [0.9, -1]},
                       {"context": "auto", "tried": "auto", "ratios": "0.9"},
                       {"context": "auto", "tried": "auto", "ratios": [0.9], "evidence": 5}):
        assert HardwareTiming.from_json(unreadable) is None
