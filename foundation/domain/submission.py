"""One submit as every caller makes it: `farm submit`, farm.submit(), a client's request and the coordinator's call.

A Submission is what is asked: the model, target and batch, the budget and how to spend it. Where it
runs (this process's registry and builders, or a coordinator) is the caller's and stays out of it.
It crosses the wire as a SubmitRequest through foundation.wire.submission, the one place that
converts it. Each caller makes its Submission with asked_submission, which checks every value
(`--until` too) once for all of them, so that a value is refused in the same words everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from foundation.domain import request_limits as limits
from foundation.domain.job_spec import DEFAULT_VALIDATION_RUNS, JobSpec, SpecError
from foundation.domain.reuse import ReuseMode, default_mode
from foundation.domain.tuning_rounds import DEFAULT_PATIENCE, UntilRequest, parse_goal
from foundation.domain.weights_layout import AUTO, check_request
from foundation.errors import BadInput

GOAL_FIX = "give onnxruntime, or a latency such as 20ms"


@dataclass(frozen=True)
class OnnxUpload:
    """An ONNX model's file as a submit to a coordinator carries it."""

    file_name: str
    content: bytes
    sha256: str  # hex of ``content`` as the sender computed it; empty: not given


@dataclass(frozen=True)
class Submission:
    """What one submit asks for; ``reuse`` given as its name is read as a ReuseMode (BadInput if none)."""

    # A zoo model's name or an ONNX file's path where the submit is made; with ``onnx``, the file's name.
    model: str
    target: str  # llvm, cuda, or a TVM target as JSON
    batch: int = 1
    trials: int | None = None  # the job's trial budget; None: the default for its tasks
    trials_per_task: int | None = None
    retune: bool = False
    reuse: ReuseMode | None = None  # None: default_mode(retune)
    seed: int = 0
    warm_start: bool = True  # seeds from similar workloads and the stored cost model (off: --cold)
    validation_runs: int = DEFAULT_VALIDATION_RUNS
    weights_layout: str = AUTO  # auto, plain, prepacked or prepacked-nchwc (foundation.domain.weights_layout)
    until: UntilRequest | None = None  # tune in rounds until the model beats a goal (`until_request`)
    # A fingerprint to tune for (through a coordinator), or whose library answers (embedded: this
    # CPU at another size); None: every fingerprint of the target kind, or this box's.
    fingerprint: str | None = None
    onnx: OnnxUpload | None = None  # the model's file, as a submit to a coordinator carries it

    def __post_init__(self) -> None:
        if self.reuse is not None and not isinstance(self.reuse, ReuseMode):
            object.__setattr__(self, "reuse", reuse_mode(self.reuse))

    @property
    def reuse_mode(self) -> ReuseMode:
        """The reuse asked for, else the default for ``retune``."""
        return self.reuse if self.reuse is not None else default_mode(self.retune)

    def job_spec(self, mode: str) -> JobSpec:
        """What the job is asked to do, run in ``mode`` (its model, target and fingerprint are the job's
        columns); BadInput for what cannot be."""
        try:
            return JobSpec(mode=mode, weights_layout=self.weights_layout, trials=self.trials,
                           trials_per_task=self.trials_per_task, retune=self.retune, reuse=self.reuse_mode,
                           seed=self.seed, warm_start=self.warm_start, validation_runs=self.validation_runs,
                           until=self.until)
        except SpecError as err:
            raise BadInput(str(err), "see `farm submit --help`") from None


def asked_submission(*, model: str, target: str, batch: int = 1, trials: int | None = None,
                     trials_per_task: int | None = None, retune: bool = False, reuse: str | ReuseMode | None = None,
                     seed: int = 0, warm_start: bool = True, runs: int = DEFAULT_VALIDATION_RUNS,
                     weights_layout: str = AUTO, until: str | None = None, patience: int | None = None,
                     round_trials: int | None = None, build_workers: int | None = None, fingerprint: str | None = None,
                     onnx: OnnxUpload | None = None, spelled: Callable[[str], str] = str) -> Submission:
    """What `farm submit`, farm.submit or a coordinator's caller asked, as a Submission: every value checked
    here, the same for all three, before anything is written. BadInput names the first value refused as
    ``spelled`` spells the argument (`--trials`, trials, until.patience), with the bounds of
    foundation.domain.request_limits. ``build_workers`` is checked with the rest; it is the embedded
    run's (MeasureSettings), not the submission's. The batch is checked where the model is keyed."""
    limits.check_numbers(dict(trials=trials, trials_per_task=trials_per_task, build_workers=build_workers, runs=runs,
                              seed=seed, patience=patience, round_trials=round_trials), limits.SUBMIT_NUMBERS,
                         spelled)
    for name, value in (("retune", retune), ("warm_start", warm_start)):
        limits.check_flag(spelled(name), value)
    if not isinstance(model, str):
        raise BadInput(f"{spelled('model')} must be a zoo model's name or an ONNX file's path, "
                       f"got {limits.shown_value(model)}", "e.g. resnet-18")
    limits.check_text(spelled("model"), model, limits.MAX_TEXT_LENGTH)
    if not isinstance(target, str):
        raise BadInput(f"{spelled('target')} must be llvm, cuda or a TVM target's JSON, "
                       f"got {limits.shown_value(target)}", "e.g. llvm")
    limits.check_text(spelled("target"), target, limits.MAX_TEXT_LENGTH, required=True)
    limits.check_optional_text(spelled("fingerprint"), fingerprint, limits.MAX_ID_LENGTH, "cpu-0123456789ab")
    if not isinstance(reuse, ReuseMode):
        limits.check_optional_text(spelled("reuse"), reuse, 32, "auto")
    limits.check_optional_text(spelled("weights_layout"), weights_layout, 32, "plain")
    check_request(weights_layout)
    limits.check_optional_text(spelled("until"), until, 64, "onnxruntime or 20ms")
    goal = until_request(until, patience, round_trials, spelled=spelled)
    return Submission(model=model, target=target, batch=batch, trials=trials, trials_per_task=trials_per_task,
                      retune=retune, reuse=reuse, seed=seed, warm_start=warm_start, validation_runs=runs,
                      weights_layout=weights_layout, until=goal, fingerprint=fingerprint, onnx=onnx)


def reuse_mode(name: str) -> ReuseMode:
    try:
        return ReuseMode(name)
    except ValueError:
        raise BadInput(f"unknown reuse mode {name!r}", f"use one of {', '.join(m.value for m in ReuseMode)}") from None


def until_request(goal: str | None, patience: int | None = None, round_trials: int | None = None, *,
                  spelled: Callable[[str], str] = str) -> UntilRequest | None:
    """`--until` and its options read, as `farm submit`, farm.submit and the coordinator take them; None
    without a goal. ``spelled`` names an option as the caller knows it (`--round-trials`, round_trials)."""
    if goal is None:
        if patience is not None or round_trials is not None:
            raise BadInput(f"{spelled('patience')} and {spelled('round_trials')} only apply with {spelled('until')}",
                           f"give {spelled('until')} too ({GOAL_FIX}), or leave them out")
        return None
    try:
        parsed = parse_goal(goal)
    except ValueError as err:
        raise BadInput(str(err), GOAL_FIX) from None
    return UntilRequest(parsed, DEFAULT_PATIENCE if patience is None else patience, round_trials)
