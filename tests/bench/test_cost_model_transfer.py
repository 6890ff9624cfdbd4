"""bench/cost_model_transfer.py: leave one fingerprint out, on a registry of synthetic records.

A plumbing test: the schedules are real, the boxes and times made up (tests/support/cross_records.py),
so the figures it prints are no result; the script's figures come from a registry of real records.
"""

from __future__ import annotations

import json

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
def test_every_fingerprint_is_held_out_once_against_every_model(tmp_path, capsys):
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    from support.cross_records import BOXES, synthetic_registry

    url = f"sqlite:///{tmp_path / 'registry.db'}"
    synthetic_registry(url, tvm.target.Target({"kind": "llvm", "num-cores": 2}), per_workload=20).dispose()
    out = tmp_path / "transfer.json"
    assert cost_model_transfer.main([url, "--out", str(out), "--conditions", "synthetic times"]) == 0
    printed = capsys.readouterr().out
    assert "120 records of 3 cpu fingerprints" in printed and f"wrote {out}" in printed
    document = json.loads(out.read_text())
    assert document["conditions"] == "synthetic times"
    assert "normalised per (workload, fingerprint)" in document["labels"]
    assert {fp: f["records"] for fp, f in document["fingerprints"].items()} == {fp: 40 for fp, _ in BOXES}
    rows = document["rows"]
    assert [(r["held_out"], r["model"]) for r in rows] == [
        (fp, model) for fp, _ in sorted(BOXES) for model in cost_model_transfer.MODELS]
    for row in rows:
        assert row["eval_records"] == 40 - 3  # 7% of 40 trained the own model; the rest are scored
        assert row["workloads"] == 2 and row["pairs"] > 0 and len(row["per_workload"]) == 2
        for measure in cost_model_transfer.MEASURES:
            assert 0 <= row[measure] <= 1
            assert all(w[measure] is None or 0 <= w[measure] <= 1 for w in row["per_workload"])
        others, own = 80, 3
        trained_on_others = {"untrained": 0, "own 7%": own, "cross, no device": others, "cross + device": others,
                             "cross + derived device": others}
        assert row["train_samples"] == trained_on_others.get(row["model"], others + own)
    assert set(document["summary"]) == set(cost_model_transfer.MODELS)
    assert all(figures["held_out"] == 3 for figures in document["summary"].values())


def test_the_dataset_script_refuses_an_unknown_view_or_budget_with_exit_2(tmp_path, capsys):
    import cost_model_dataset

    assert cost_model_dataset.main(["--home", str(tmp_path), "--views", "native,quantum"]) == 2
    assert "unknown view(s) quantum" in capsys.readouterr().err
    assert cost_model_dataset.main(["--home", str(tmp_path), "--trials-per-task", "0"]) == 2
    assert "--trials-per-task" in capsys.readouterr().err


def test_a_view_runs_its_submit_on_its_cpus_for_its_cpu():
    from pathlib import Path

    import cost_model_dataset

    view = cost_model_dataset.VIEWS["haswell-1core"]
    assert view.command(["farm", "submit"]) == ["taskset", "-c", "0", "farm", "submit"]
    env = view.environment(Path("/tmp/home"))
    assert (env["FARM_CPU_VIEW_MCPU"], env["OPENBLAS_CORETYPE"], env["TVM_NUM_THREADS"]) == ("haswell", "Haswell", "1")
    native = cost_model_dataset.VIEWS["native"].environment(Path("/tmp/home"))
    assert "FARM_CPU_VIEW_MCPU" not in native and "TVM_NUM_THREADS" not in native
    assert native["FARM_HOME"] == "/tmp/home" and native["FARM_SHIPPED_PACKS"] == "0"


@pytest.mark.slow
def test_the_dataset_script_evaluates_its_registry_with_the_shipped_packs(tmp_path, monkeypatch, capsys):
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import cost_model_dataset
    import tvm

    from foundation.config import SHIPPED_PACKS_DIR_ENV

    from support.cross_records import synthetic_registry

    synthetic_registry(f"sqlite:///{tmp_path / 'dataset.db'}", tvm.target.Target({"kind": "llvm", "num-cores": 2}),
                       sizes=(32,), per_workload=20).dispose()
    (tmp_path / "packs").mkdir()
    monkeypatch.setenv(SHIPPED_PACKS_DIR_ENV, str(tmp_path / "packs"))  # none shipped: the test's records alone
    out = tmp_path / "result.json"
    kept = tmp_path / "kept"  # no view kept from earlier runs
    assert cost_model_dataset.main(["--home", str(tmp_path), "--skip-tuning", "--keep", str(kept),
                                    "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["conditions"].startswith("recorded on a shared 2-core VM beside other work")
    assert "--shipped" in document["command"] and len(document["fingerprints"]) == 3


def test_the_older_isas_are_views_with_the_probes_kernels_held_to_them():
    from pathlib import Path

    import cost_model_dataset

    for name, core in (("sandybridge", "Sandybridge"), ("nehalem-1core", "Nehalem")):
        env = cost_model_dataset.VIEWS[name].environment(Path("/tmp/home"))
        assert (env["FARM_CPU_VIEW_MCPU"], env["OPENBLAS_CORETYPE"]) == (name.removesuffix("-1core"), core)
    assert set(cost_model_dataset.DEFAULT_VIEWS) < set(cost_model_dataset.VIEWS)


@pytest.mark.slow
def test_each_views_records_are_kept_as_a_pack_added_to_and_read_back_by_the_evaluation(
        tmp_path, monkeypatch, capsys):
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import cost_model_dataset
    import tvm

    from foundation.config import SHIPPED_PACKS_DIR_ENV
    from foundation.registry.packs import read_pack

    from support.cross_records import BOXES, synthetic_registry

    url = f"sqlite:///{tmp_path / 'dataset.db'}"
    synthetic_registry(url, tvm.target.Target({"kind": "llvm", "num-cores": 2}), sizes=(32,), per_workload=20).dispose()
    (first, _), (second, _), (shipped, _) = BOXES
    packs = tmp_path / "packs"
    packs.mkdir()
    (packs / f"{shipped}.farmpack").write_bytes(b"")  # this box as it is: a shipped pack's, never kept
    monkeypatch.setenv(SHIPPED_PACKS_DIR_ENV, str(packs))
    log = [{"view": "haswell", "fingerprint": first, "rc": 0, "command": "farm submit resnet-18 ..."},
           {"view": "nehalem", "fingerprint": second, "rc": 0, "command": "farm submit mobilenet ..."},
           {"view": "native", "fingerprint": shipped, "rc": 0, "command": "farm submit resnet-18 ..."},
           {"view": "sandybridge", "rc": 1, "command": "farm submit resnet-18 ...", "error": "failed"}]
    kept = tmp_path / "kept"
    cost_model_dataset.keep_views(url, log, kept)
    assert sorted(p.name for p in kept.iterdir()) == sorted(f"{fp}.farmpack" for fp in (first, second))
    store, header = read_pack(kept / f"{first}.farmpack")
    records = len(store.records.all_records(fingerprint_id=first))
    assert records == 20 and not store.records.all_records(fingerprint_id=second)
    assert header["view"] == "haswell" and header["tuned_with"] == ["farm submit resnet-18 ..."]
    assert header["cpus"] and header["dates"] and header["tables"]["artifacts"]["rows"] == 0
    store.dispose()
    # Kept again (the next session's run): added to, nothing twice.
    cost_model_dataset.keep_views(url, log, kept)
    again, _ = read_pack(kept / f"{first}.farmpack")
    assert len(again.records.all_records(fingerprint_id=first)) == records
    again.dispose()
    # The evaluation reads the kept views beside a registry that holds none of them.
    (packs / f"{shipped}.farmpack").unlink()
    out = tmp_path / "result.json"
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    from foundation.registry.store import RegistryStore

    RegistryStore(empty).dispose()
    assert cost_model_transfer.main([empty, "--packs", str(kept), "--out", str(out)]) == 0
    assert set(json.loads(out.read_text())["fingerprints"]) == {first, second}
