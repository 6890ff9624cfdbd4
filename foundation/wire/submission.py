"""A Submission as the wire's SubmitRequest and back: the one place the two are converted.

The wire's unset values (0, the empty string) mean the defaults proto/tvmfarm/v1/farm.proto gives
them; a Submission holds the defaults themselves, so one read back from its request equals it.
"""

from __future__ import annotations

from foundation.domain.job_spec import DEFAULT_VALIDATION_RUNS
from foundation.domain.submission import OnnxUpload, Submission, asked_submission
from foundation.domain.weights_layout import AUTO
from foundation.wire import farm_pb2


def submit_request(submission: Submission) -> farm_pb2.SubmitRequest:
    """The request a client sends. A model given by its path travels as its file: the caller reads it
    into ``submission.onnx`` first (farm.client); without it the model is a zoo name."""
    s = submission
    request = farm_pb2.SubmitRequest(
        batch=s.batch, target=s.target, fingerprint_id=s.fingerprint or "", trials=s.trials or 0,
        trials_per_task=s.trials_per_task or 0, retune=s.retune, seed=s.seed, validation_runs=s.validation_runs,
        reuse=s.reuse.value if s.reuse is not None else "", weights_layout=s.weights_layout, cold=not s.warm_start,
    )
    if s.until is not None:
        request.until.CopyFrom(farm_pb2.Until(goal=s.until.goal.text(), patience=s.until.patience,
                                              round_trials=s.until.round_trials or 0))
    if s.onnx is not None:
        request.onnx.CopyFrom(farm_pb2.OnnxModel(file_name=s.onnx.file_name, content=s.onnx.content,
                                                 sha256=s.onnx.sha256))
    else:
        request.zoo_name = s.model
    return request


def submission_of(request: farm_pb2.SubmitRequest) -> Submission:
    """What a received request asks for, checked as `farm submit` and farm.submit check theirs
    (asked_submission): BadInput naming the field refused."""
    onnx = None
    if request.WhichOneof("model") == "onnx":
        onnx = OnnxUpload(request.onnx.file_name, request.onnx.content, request.onnx.sha256)
    # An unset Until is no goal; its unset numbers are the defaults.
    until = request.until if request.HasField("until") else farm_pb2.Until()
    return asked_submission(
        model=onnx.file_name if onnx is not None else request.zoo_name, target=request.target, batch=request.batch,
        trials=request.trials or None, trials_per_task=request.trials_per_task or None, retune=request.retune,
        reuse=request.reuse or None, seed=request.seed, warm_start=not request.cold,
        runs=request.validation_runs or DEFAULT_VALIDATION_RUNS, weights_layout=request.weights_layout or AUTO,
        until=until.goal if request.HasField("until") else None, patience=until.patience or None,
        round_trials=until.round_trials or None,
        fingerprint=request.fingerprint_id or None, onnx=onnx, spelled=field_name,
    )


# farm.submit's argument names that the wire spells otherwise.
_FIELD_NAMES = {"model": "zoo_name", "runs": "validation_runs", "warm_start": "cold", "patience": "until.patience",
                "round_trials": "until.round_trials", "until": "until.goal", "fingerprint": "fingerprint_id"}


def field_name(argument: str) -> str:
    """farm.submit's argument as SubmitRequest names its field: runs is validation_runs."""
    return _FIELD_NAMES.get(argument, argument)
