"""Which cache state a task's candidates are timed in: asked for, or chosen by its weights against the L2."""

from __future__ import annotations

import pytest

from foundation.domain.timing_context import BufferRoles, TimingContext, parse_timing_context, task_timing
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


@pytest.mark.parametrize("context", [c for c in TimingContext if c is not TimingContext.AUTO])
def test_a_context_asked_for_is_every_tasks(context):
    assert task_timing(context, DENSE, l2_kib=1).context is context


def test_only_the_flushing_contexts_time_a_call_a_repeat():
    assert {c for c in TimingContext if c.flushes} == {TimingContext.FLUSHED, TimingContext.WEIGHTS,
                                                       TimingContext.PRODUCER}


def test_an_unknown_context_is_refused_naming_the_choices():
    assert parse_timing_context(" Auto ", "X") is TimingContext.AUTO
    with pytest.raises(BadInput) as err:
        parse_timing_context("cold", "FARM_TIMING_CONTEXT")
    assert "FARM_TIMING_CONTEXT='cold'" in str(err.value) and "weights" in err.value.fix
