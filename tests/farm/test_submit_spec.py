"""One submit, one spec: the embedded request and a coordinator's request make the same JobSpec, but for its mode."""

from __future__ import annotations

from dataclasses import replace

import pytest

from farm.submit_values import SubmitRequest
from foundation.domain.job_spec import DEFAULT_VALIDATION_RUNS, DISTRIBUTED, EMBEDDED
from foundation.domain.tuning_rounds import UntilRequest, parse_goal
from foundation.errors import BadInput
from foundation.wire import farm_pb2
from foundation.wire.submission import submission_of, submit_request


@pytest.mark.parametrize("asked", [
    dict(),
    dict(trials=64, trials_per_task=8, seed=3, warm_start=False, validation_runs=5, weights_layout="prepacked"),
    dict(retune=True),
    dict(retune=True, reuse="full"),
])
def test_both_modes_make_the_same_spec(asked):
    request = SubmitRequest(model="mlp-tiny", target="llvm", batch=1, **asked)
    embedded = request.job_spec()
    # What a coordinator makes of the same submit, sent over the wire.
    received = submission_of(farm_pb2.SubmitRequest.FromString(submit_request(request).SerializeToString()))
    distributed = received.job_spec(DISTRIBUTED)
    assert embedded.mode == EMBEDDED and distributed.mode == DISTRIBUTED
    assert replace(distributed, mode=EMBEDDED) == embedded
    assert embedded.validation_runs == asked.get("validation_runs", DEFAULT_VALIDATION_RUNS)


def test_a_goal_is_part_of_the_spec():
    until = UntilRequest(parse_goal("2ms"), patience=3, round_trials=8)
    assert SubmitRequest(model="mlp-tiny", target="llvm", batch=1, until=until).job_spec().until == until


def test_what_cannot_be_is_refused_as_bad_input():
    with pytest.raises(BadInput, match="unknown reuse mode 'sometimes'"):
        SubmitRequest(model="mlp-tiny", target="llvm", batch=1, reuse="sometimes").job_spec()
    with pytest.raises(BadInput, match="validation_runs 0"):
        SubmitRequest(model="mlp-tiny", target="llvm", batch=1, validation_runs=0).job_spec()
    with pytest.raises(BadInput, match="trials -1"):
        SubmitRequest(model="mlp-tiny", target="llvm", batch=1, trials=-1).job_spec(DISTRIBUTED)
