"""bench/cost_model_transfer.py: leave one fingerprint out, on a registry of synthetic records.

A plumbing test: the schedules are real, the boxes and times made up (tests/support/cross_records.py),
so the figures it prints are no result; the script's figures come from a registry of real records.
"""

from __future__ import annotations

import csv
import math

import cost_model_transfer
import pytest


def test_ranking_scores_pairs_and_top_k_and_a_random_order_by_its_expectation():
    seconds = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    perfect = cost_model_transfer.ranking([([6, 5, 4, 3, 2, 1], seconds)])
    assert perfect["pairs"] == 15 and perfect["pairwise_accuracy"] == 1.0
    assert perfect["top1_recall"] == perfect["top5_recall"] == 1.0
    backwards = cost_model_transfer.ranking([([1, 2, 3, 4, 5, 6], seconds)])
    assert backwards["pairwise_accuracy"] == 0.0 and backwards["top1_recall"] == 0.0
    assert backwards["top5_recall"] == 4 / 5
    random = cost_model_transfer.ranking([(None, seconds), (None, [1.0, 2.0])])
    assert random["pairwise_accuracy"] == 0.5 and random["workloads"] == 2
    assert random["top1_recall"] == (1 / 6 + 1 / 2) / 2 and random["top5_recall"] == (5 / 6 + 1) / 2


def test_a_share_outside_zero_to_one_is_refused_with_exit_2(tmp_path, capsys):
    assert cost_model_transfer.main([f"sqlite:///{tmp_path / 'r.db'}", "--own-share", "1.5"]) == 2
    assert "--own-share" in capsys.readouterr().err


@pytest.mark.slow
def test_every_fingerprint_is_held_out_once_against_the_four_models(tmp_path, capsys):
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    from support.cross_records import BOXES, synthetic_registry

    url = f"sqlite:///{tmp_path / 'registry.db'}"
    synthetic_registry(url, tvm.target.Target({"kind": "llvm", "num-cores": 2}), per_workload=20).dispose()
    out = tmp_path / "transfer.csv"
    assert cost_model_transfer.main([url, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "120 records of 3 cpu fingerprints" in printed and f"wrote {out}" in printed
    rows = list(csv.DictReader(out.open()))
    assert [(r["held_out"], r["model"]) for r in rows] == [
        (fp, model) for fp, _ in sorted(BOXES) for model in cost_model_transfer.MODELS]
    for row in rows:
        assert int(row["eval_records"]) == 40 - 3  # 7% of 40 trained the own model; the rest are scored
        assert int(row["workloads"]) == 2 and int(row["pairs"]) > 0
        for measure in ("pairwise_accuracy", "top1_recall", "top5_recall"):
            assert 0 <= float(row[measure]) <= 1 and not math.isnan(float(row[measure]))
        assert int(row["train_samples"]) == {"untrained": 0, "own 7%": 3}.get(row["model"], 80)
