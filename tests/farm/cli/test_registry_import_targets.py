"""`farm registry import` of a log tuned for another CPU, through the CLI: refused whole (exit 2,
nothing written) or, mixed with this box's records, imported without them, with a warning line and
a summary that counts what was really added."""

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
                               "--registry", registry, home=home)
    (line,) = [x for x in alone.stderr.splitlines() if x.strip()]
    assert alone.returncode == 2 and line.startswith("error: every record of ") and "(2) was tuned for another target" \
        in line and "mcpu" in line, alone.stderr
    assert "nothing was imported" in line

    mixed = run_farm_inprocess("registry", "import", str(_log(tmp_path / "mixed", [ours, foreign, foreign])),
                               "--registry", registry, "--json", home=home)
    assert mixed.returncode == 0, mixed.stderr
    summary = json.loads(mixed.stdout)
    assert (summary["records"], summary["refused_foreign"], summary["skipped_duplicates"]) == (1, 2, 0), summary
    (warning,) = [x for x in mixed.stderr.splitlines() if x.strip()]
    assert warning.startswith("warning: refused 2 records tuned for another target (its mcpu is "), warning
