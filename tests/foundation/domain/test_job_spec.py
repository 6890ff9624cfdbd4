"""A job's spec and notes: checked when made, stored and read back whole, strict about what a row holds."""

import pytest

from foundation.domain.built_untuned import BuiltUntuned
from foundation.domain.job_spec import (
    DEFAULT_VALIDATION_RUNS,
    DISTRIBUTED,
    EMBEDDED,
    SPEC_VERSION,
    JobNotes,
    JobSpec,
    SpecError,
    noted,
    read_options,
    stored_options,
    tuned_form,
)
from foundation.domain.reuse import ReuseMode, ReuseSummary
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.trial_plan import PlannedTrials, TrialPlan
from foundation.domain.tuning_rounds import RoundResult, Stop, UntilRequest, compare, parse_goal
from foundation.domain.warm_seeds import WarmSeeds
from foundation.domain.warm_start_use import WarmStartUse, WarmStartUsed
from foundation.domain.weights_layout import LayoutChoice, WeightsLayout
from foundation.errors import RegistryError

SPEC = JobSpec(mode=DISTRIBUTED, weights_layout="auto", trials=64, trials_per_task=None, retune=False,
               reuse=ReuseMode.FULL, seed=3, warm_start=False, validation_runs=5,
               until=UntilRequest(parse_goal("2ms"), patience=3, round_trials=16))


class _Job:
    def __init__(self, options: dict, id: str = "job-1"):
        self.id, self.options = id, options


REUSED = ReuseSummary(ReuseMode.FULL, tasks=2, reused=1, skipped=1, topped_up=0, topup_trials=0, planned_trials=16,
                      trials=8, trials_saved=8)
ROUNDS = RoundsOutcome(parse_goal("2ms"), 2.0, rounds=[RoundResult(8, compare([[2.5] * 4] * 5, goal_ms=2.0), 2.4)],
                       planned=[[8], [8]])
USED = WarmStartUsed({"s0": WarmStartUse(4, 1, 2, 1, 0, "ab" * 32, "", cost_model_kind="xgb", cost_model_id=3)})


def test_a_spec_and_its_notes_survive_their_stored_form():
    notes = JobNotes(WeightsLayout.PREPACKED, LayoutChoice(WeightsLayout.PREPACKED, "covered best", {"plain": 0.5}),
                     reused=REUSED, trial_plan=TrialPlan((PlannedTrials("dense", 8, 0.75, False, True),), 16, 8),
                     until=ROUNDS, warm_seeds=WarmSeeds(4, {"dense": (3, 1)}), warm_start_used=USED,
                     built_untuned=BuiltUntuned(("relu",), 2))
    stored = stored_options(SPEC, notes)
    assert stored["spec_version"] == SPEC_VERSION and stored["reuse"] == "full"
    # The goal's copies for people reading the row, as the rows have always held them.
    assert (stored["until_goal"], stored["patience"], stored["round_trials"]) == ("2 ms", 3, 16)
    read = read_options(stored)
    assert read.spec == SPEC and read.notes == notes
    assert tuned_form(stored) is WeightsLayout.PREPACKED


def test_notes_change_and_the_spec_stays():
    job = _Job(stored_options(SPEC))
    changed = noted(job, until=ROUNDS, warm_seeds=WarmSeeds(0))
    read = read_options(changed)
    assert read.spec == SPEC and read.notes.until == ROUNDS and read.notes.until.stopped is None
    assert read.notes.warm_seeds == WarmSeeds(0) and read.notes.reused is None
    # The rounds go on: the next write keeps what the job learned since.
    ended = RoundsOutcome.from_json(ROUNDS.to_json())
    ended.stopped = Stop.PATIENCE
    assert read_options(noted(_Job(changed), until=ended)).notes.until.stopped is Stop.PATIENCE


def test_a_note_is_its_type_never_its_json():
    with pytest.raises(SpecError, match="reused .* is not a ReuseSummary"):
        JobNotes(reused=REUSED.to_json())
    with pytest.raises(SpecError, match="until .* is not a RoundsOutcome"):
        JobNotes(until=ROUNDS.to_json())
    with pytest.raises(SpecError, match="warm_start_used .* is not a WarmStartUsed"):
        JobNotes(warm_start_used=USED.to_json())


@pytest.mark.parametrize("note", [
    {"reused": {**REUSED.to_json(), "per_task": []}},  # a field its type does not know
    {"built_untuned": {"tasks": ["relu"]}},  # one it lacks
    {"weights_layout_choice": {"chosen": "sideways", "why": ""}},  # a value it cannot be
    {"reused": {"tasks": 1, "skipped": 1}},  # counts without a mode: no tvm-farm ever wrote one so
    {"until": {**ROUNDS.to_json(), "stopped": "bored"}},
    {"until": {"goal": "2 ms"}},
    {"until": "reached"},
    {"warm_start_used": {"s0": {**USED.to_json()["s0"], "seeds_offered": -1}}},
    {"warm_start_used": {"s0": {"seeds_offered": 4}}},
    {"warm_start_used": ["s0"]},
])
def test_a_note_its_type_cannot_read_is_a_registry_error(note):
    with pytest.raises(RegistryError, match=f"job job-9 .* cannot read: its note {next(iter(note))}"):
        read_options({**stored_options(SPEC), **note}, "job-9")


@pytest.mark.parametrize("bad", [
    dict(mode="somewhere"), dict(weights_layout="sideways"), dict(trials=-1), dict(trials="8"),
    dict(validation_runs=0), dict(seed=1.5), dict(warm_start="yes"), dict(reuse="full"),
])
def test_a_spec_that_cannot_be_is_refused_when_made(bad):
    fields = dict(mode=EMBEDDED, weights_layout="plain") | bad
    with pytest.raises(SpecError):
        JobSpec(**fields)


def test_a_row_with_an_unknown_field_names_it():
    with pytest.raises(RegistryError, match="job job-9 .* does not know: per_task"):
        read_options({**stored_options(SPEC), "per_task": 8}, "job-9")


def test_a_row_missing_a_spec_field_names_it():
    stored = stored_options(SPEC)
    del stored["validation_runs"]
    with pytest.raises(RegistryError, match="lacks its spec's validation_runs"):
        read_options(stored, "job-9")


def test_a_row_of_another_version_is_refused():
    with pytest.raises(RegistryError, match="version 2"):
        read_options({**stored_options(SPEC), "spec_version": 2})


def test_a_bad_value_in_a_row_is_a_registry_error():
    with pytest.raises(RegistryError, match="cannot read"):
        read_options({**stored_options(SPEC), "reuse": "sometimes"})


# A job row as the farm wrote it before its notes were typed (a shipped pack's, recorded 2026-12-03 11:46 UTC,
# its lists cut to one entry, the trial plan's planned total with them).
_WRITTEN_BEFORE_TYPED_NOTES = {
    "built_untuned": {"of": 18, "tasks": ["fused_cast_reshape_subtract_multiply1"]}, "mode": "embedded",
    "retune": False, "reuse": "auto",
    "reused": {"mode": "auto", "planned_trials": 288, "reused": 0, "skipped": 0, "tasks": 18, "topped_up": 0,
               "topup_trials": 0, "trials": 288, "trials_saved": 0},
    "seed": 0, "spec_version": 1,
    "trial_plan": {"budget": 576, "per_task_cap": 32, "planned": 8,
                   "tasks": [{"measured": False, "minor": True, "share": 0.0, "task": "fused_split1_reshape51",
                              "trials": 8}]},
    "trials": None, "trials_per_task": 32, "until_request": None, "validation_runs": 20, "warm_start": False,
    "warm_start_used": {"embedded": {"cost_model_note": "", "cost_model_sha256": "", "seeds_failed": 0,
                                     "seeds_offered": 0, "seeds_other_fingerprints": 0, "seeds_own_fingerprint": 0,
                                     "seeds_rejected": 0}},
    "weights_layout": "prepacked-nchwc",
    "weights_layout_choice": {"chosen": "prepacked-nchwc", "coverage": {"prepacked-nchwc": 0.0},
                              "why": "auto's default for CPUs"},
    "weights_layout_request": "auto",
}


def test_a_row_written_before_the_notes_were_typed_reads_and_is_written_back_the_same():
    read = read_options(_WRITTEN_BEFORE_TYPED_NOTES, "job-1")
    assert read.spec.mode is EMBEDDED and read.spec.trials_per_task == 32
    assert read.notes.reused == ReuseSummary(ReuseMode.AUTO, tasks=18, reused=0, skipped=0, topped_up=0,
                                             topup_trials=0, planned_trials=288, trials=288, trials_saved=0)
    assert read.notes.built_untuned == BuiltUntuned(("fused_cast_reshape_subtract_multiply1",), 18)
    assert read.notes.weights_layout is WeightsLayout.PREPACKED_NCHWC
    assert read.to_json() == _WRITTEN_BEFORE_TYPED_NOTES


def test_rows_from_before_the_version_read_with_the_documented_defaults():
    read = read_options({})
    assert read.spec == JobSpec(mode=EMBEDDED, weights_layout=None, trials=None, trials_per_task=None,
                                retune=False, reuse=ReuseMode.AUTO, seed=0, warm_start=True,
                                validation_runs=DEFAULT_VALIDATION_RUNS, until=None)
    assert read.notes == JobNotes()
    retuned = read_options({"retune": True, "warm_start": None, "seed": 7, "mode": "distributed",
                            "weights_layout": "prepacked-nchwc"}).spec
    assert (retuned.reuse, retuned.warm_start, retuned.seed, retuned.mode) == (ReuseMode.OFF, True, 7, DISTRIBUTED)
    # An embedded job tuned in rounds kept only the goal's copies.
    embedded = read_options({"mode": "embedded", "until_goal": "0.001 ms", "patience": 2, "round_trials": 4}).spec
    assert embedded.until == UntilRequest(parse_goal("0.001ms"), 2, 4)
    # Written back in the current form once its notes change.
    assert noted(_Job({"seed": 1}), reused=REUSED)["spec_version"] == SPEC_VERSION
