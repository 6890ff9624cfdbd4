"""Which form of weights a job tunes, from what was asked and the target kind."""

from __future__ import annotations

import pytest

from foundation.domain import weights_layout as wl
from foundation.domain.job_spec import tuned_form
from foundation.domain.weights_layout import WeightsLayout, check_request, weights_layout_for
from foundation.errors import BadInput


def test_cpu_targets_take_what_was_asked_and_auto_means_the_cpu_default():
    assert weights_layout_for("plain", "llvm") is WeightsLayout.PLAIN
    assert weights_layout_for("prepacked", "llvm") is WeightsLayout.PREPACKED
    assert weights_layout_for("prepacked-nchwc", "llvm") is WeightsLayout.PREPACKED_NCHWC
    assert weights_layout_for("auto", "llvm") is wl.CPU_DEFAULT
    # Blocked activations come with prepacked weights; only they block activations.
    assert [(f.prepacks, f.blocks_activations) for f in WeightsLayout] == [(False, False), (True, False), (True, True)]


def test_other_targets_are_plain_and_refuse_prepacking():
    assert weights_layout_for("auto", "cuda") is WeightsLayout.PLAIN
    assert weights_layout_for("plain", "cuda") is WeightsLayout.PLAIN
    with pytest.raises(BadInput, match="cannot be prepacked for a cuda target") as refused:
        weights_layout_for("prepacked", "cuda")
    assert "--weights-layout plain" in refused.value.fix
    with pytest.raises(BadInput, match="cannot be prepacked for a cuda target"):
        weights_layout_for("prepacked-nchwc", "cuda")


def test_an_unknown_request_is_bad_input():
    with pytest.raises(BadInput, match="unknown weights layout 'packed'"):
        check_request("packed")
    with pytest.raises(BadInput):
        weights_layout_for("", "llvm")


def test_a_job_says_which_form_it_tuned_and_old_jobs_tuned_plain():
    assert tuned_form({"weights_layout": "prepacked"}) is WeightsLayout.PREPACKED
    assert tuned_form({"weights_layout": "plain"}) is WeightsLayout.PLAIN
    assert tuned_form({"mode": "embedded"}) is WeightsLayout.PLAIN


def test_auto_takes_the_form_the_registry_covers_clearly_more_of():
    plain, packed, blocked = WeightsLayout.PLAIN, WeightsLayout.PREPACKED, WeightsLayout.PREPACKED_NCHWC
    # TVM's own logs are plain: they cover a model in that form only.
    choice = wl.choose_by_coverage(blocked, {blocked: 0.0, packed: 0.0, plain: 0.93})
    assert choice.chosen is plain and "93%" in choice.why and "plain" in choice.why
    assert choice.to_json() == {"chosen": "plain", "why": choice.why,
                                "coverage": {"prepacked-nchwc": 0.0, "prepacked": 0.0, "plain": 0.93}}
    assert wl.LayoutChoice.from_json(choice.to_json()).chosen is plain
    # Not clearly more (less than COVERAGE_MARGIN): the default stays.
    assert wl.choose_by_coverage(blocked, {blocked: 0.6, plain: 0.6 + wl.COVERAGE_MARGIN / 2}).chosen is blocked
    assert wl.choose_by_coverage(blocked, {blocked: 0.0, plain: 0.0}).chosen is blocked
    # Equally covered alternatives: the earlier of CPU_FORMS (prepacked before plain).
    assert wl.choose_by_coverage(blocked, {blocked: 0.1, packed: 1.0, plain: 1.0}).chosen is packed


def test_auto_may_take_every_cpu_form_and_only_plain_elsewhere():
    assert wl.auto_forms("llvm")[0] is wl.CPU_DEFAULT and set(wl.auto_forms("llvm")) == set(WeightsLayout)
    assert wl.auto_forms("cuda") == (WeightsLayout.PLAIN,)
    assert wl.asked("plain", "llvm").chosen is WeightsLayout.PLAIN
    assert wl.asked("auto", "llvm").chosen is wl.CPU_DEFAULT
