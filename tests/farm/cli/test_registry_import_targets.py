"""`farm registry import` of a log tuned for another CPU, through the CLI: its records are seeds,
filed under a fingerprint of the target they say (never this box's), alone or mixed with this
box's records, and the summary counts what was filed how."""

from __future__ import annotations

import json

import pytest

from support.farm_inprocess import run_farm_inprocess
from support.tvm_records import matmul_module, tuning_record

pytest.importorskip("tvm")


def _log(work_dir, targets):  # type: ignore[no-untyped-def]
    """A JSONDatabase of one workload, a record per target (split factors 2, 4, ...)."""
    from tvm.s_tir import meta_schedule as ms

    work_dir.mkdir(parents=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    workload = database.commit_workload(matmul_module(64))
    for i, target in enumerate(targets):
        database.commit_tuning_record(tuning_record(workload, 2 << i, [1e-3 * (i + 1)], target=target))
    return work_dir


def test_a_log_of_another_cpu_is_refused_and_a_mixed_one_counted(tmp_path):
    from farm.session import open_context

    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    ctx = open_context(registry, "llvm", create=True)
    ours = json.loads(ctx.target_json)
    ctx.store.dispose()
    foreign = {**ours, "mcpu": "znver4" if ours.get("mcpu") != "znver4" else "skylake-avx512"}
    home = tmp_path / "home"

    alone = run_farm_inprocess("registry", "import", str(_log(tmp_path / "foreign", [foreign, foreign])),
                               "--registry", registry, "--json", home=home)
    assert alone.returncode == 0, alone.stderr
    filed = json.loads(alone.stdout)
    assert (filed["records"], filed["seeds"], filed["refused_foreign"]) == (0, 2, 2), filed
    assert [fp.split("-")[:2] for fp in filed["seed_fingerprints"]] == [["cpu", "log"]]

    mixed = run_farm_inprocess("registry", "import", str(_log(tmp_path / "mixed", [ours, foreign, foreign])),
                               "--registry", registry, home=home)
    assert mixed.returncode == 0, mixed.stderr
    said = [x for x in mixed.stdout.splitlines() if x.strip()]
    assert said[0].startswith("imported 1 new records of 1 workloads for "), said
    assert said[1].startswith("filed 2 records tuned for another target (its mcpu is "), said
    assert "as seeds under cpu-log-" in said[1] and "a submit measures them here first" in said[1]
