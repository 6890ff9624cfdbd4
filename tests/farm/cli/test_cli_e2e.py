"""End to end through the real `farm` executable: tune, hit, run; an ONNX file; bad input.

Tuning and running are real `farm` processes. Listings, registry hits, exports and reports are
the same entry point run in the test's process (support.farm_inprocess): what they print and
return is the point, not the process, which would cost a Python and import start-up each.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest

from support.farm_inprocess import run_farm_inprocess

pytestmark = pytest.mark.slow

TUNE = ["--trials", "12", "--trials-per-task", "8", "--runs", "3"]


def farm(exe: str, home: Path, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    proc = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=timeout)
    return _checked(proc, args, check)


def farm_here(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`farm *args` in this process, as ``farm`` returns it."""
    return _checked(run_farm_inprocess(*args, home=home), args, check)


def _checked(proc: subprocess.CompletedProcess, args, check: bool) -> subprocess.CompletedProcess:
    if check and proc.returncode != 0:
        raise AssertionError(f"farm {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@pytest.fixture
def home(tuned_mlp_tiny, tmp_path) -> Path:
    """The test's own copy of the home where `farm submit mlp-tiny llvm 2 *TUNE` tuned (once per run,
    tests/farm/conftest.py): whatever a test changes there, no other test sees."""
    return tuned_mlp_tiny.copy_to(tmp_path / "tuned-home")


@pytest.fixture
def tuned(tuned_mlp_tiny) -> dict:
    """What that tuning's `farm submit --json` printed."""
    return tuned_mlp_tiny.submitted


def test_submit_tunes_validates_and_commits(tuned):
    assert tuned["state"] == "succeeded"
    assert tuned["cache_hit"] is False
    assert tuned["trials"] >= 8
    assert tuned["fingerprint"].startswith("cpu-")
    art = tuned["artifact"]
    assert art["id"].startswith("art-") and len(art["sha256"]) == 64
    assert art["validation"]["passed"] is True
    for key in ("mean", "median", "std"):
        assert art["latency_ms"][key] >= 0
    assert art["latency_ms"]["mean"] > 0
    assert {t["task"] for t in tuned["tasks"]}, "per-task progress is reported"


def test_second_submit_is_a_registry_hit(home, tuned):
    proc = farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--json")
    hit = json.loads(proc.stdout)
    assert hit["cache_hit"] is True
    assert hit["state"] == "succeeded"
    assert hit["trials"] == 0
    assert hit["job"] != tuned["job"]
    assert hit["artifact"]["id"] == tuned["artifact"]["id"]
    assert hit["artifact"]["sha256"] == tuned["artifact"]["sha256"]


def test_a_hit_says_when_its_library_was_tuned_with_fewer_trials_than_asked(home, tuned):
    cap = tuned["trial_plan"]["per_task_cap"]
    more = farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--trials-per-task", str(cap + 56), "--json")
    hit = json.loads(more.stdout)
    assert hit["cache_hit"] is True and hit["artifact"]["id"] == tuned["artifact"]["id"]
    why = hit["weights_layout_choice"]["why"]
    assert f"tuned with {tuned['trials']} trials (at most {cap} a task), fewer than the {cap + 56} a task" in why
    assert "--retune" in why
    shown = farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--trials-per-task", str(cap + 56))
    assert "fewer than the" in shown.stdout
    # As much as it was tuned with: nothing to say.
    same = json.loads(farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--trials-per-task", str(cap),
                                "--trials", str(tuned["trials"]), "--json").stdout)
    assert same["cache_hit"] is True and "fewer than" not in same["weights_layout_choice"]["why"]


def test_run_loads_the_stored_library(farm_exe, home, tuned, tmp_path, monkeypatch):
    x = np.random.default_rng(1).standard_normal((2, 64)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    proc = farm(farm_exe, home, "run", "mlp-tiny", "llvm", "2", "--input", str(tmp_path / "x.npy"),
                "--output", str(tmp_path / "y.npy"), "--runs", "5", "--json")
    ran = json.loads(proc.stdout)
    assert ran["artifact"] == tuned["artifact"]["id"]
    assert set(ran["latency_ms"]) >= {"mean", "median", "std"}
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (2, 10) and np.all(np.isfinite(y))
    # The same library called from Python gives the same numbers for the same input.
    import farm as farm_api

    monkeypatch.setenv("FARM_HOME", str(home))
    model = farm_api.load("mlp-tiny", "llvm", batch=2)
    (again,) = model(x)
    np.testing.assert_allclose(again, y, rtol=1e-6)


def test_retune_merges_records(farm_exe, home, tuned):
    before = _count(home, "tuning_records")
    proc = farm(farm_exe, home, "submit", "mlp-tiny", "llvm", "2", *TUNE, "--retune", "--seed", "7", "--json")
    again = json.loads(proc.stdout)
    assert again["cache_hit"] is False and again["state"] == "succeeded"
    assert _count(home, "tuning_records") > before
    assert again["artifact"]["id"] != tuned["artifact"]["id"]


def test_human_output_and_listing(home, tuned):
    newest = json.loads(farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--json").stdout)["artifact"]
    proc = farm_here(home, "submit", "mlp-tiny", "llvm", "2")
    assert "registry hit" in proc.stdout and newest["id"] in proc.stdout
    ls = json.loads(farm_here(home, "registry", "ls", "--json").stdout)
    assert ls["counts"]["artifacts"] >= 1
    shown = json.loads(farm_here(home, "registry", "show", tuned["artifact"]["id"], "--json").stdout)
    assert shown["sha256"] == tuned["artifact"]["sha256"]
    jobs = json.loads(farm_here(home, "jobs", "--json").stdout)
    assert tuned["job"] in {j["id"] for j in jobs}


def test_onnx_file_end_to_end(farm_exe, tmp_path):
    from support.onnx_models import write_small_cnn

    home = tmp_path / "home"
    path = write_small_cnn(tmp_path / "small_cnn.onnx")
    proc = farm(farm_exe, home, "submit", str(path), "llvm", "3", *TUNE, "--json")
    tuned = json.loads(proc.stdout)
    assert tuned["state"] == "succeeded" and tuned["artifact"]["validation"]["passed"]
    assert tuned["model"] == "small_cnn" and tuned["batch"] == 3
    hit = json.loads(farm(farm_exe, home, "submit", str(path), "llvm", "3", "--json").stdout)
    assert hit["cache_hit"] is True
    # The library runs with the file's own weights: compare with onnxruntime.
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(3).standard_normal((3, 3, 16, 16)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    farm(farm_exe, home, "run", str(path), "llvm", "3", "--input", str(tmp_path / "x.npy"),
         "--output", str(tmp_path / "y.npy"), "--runs", "2")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)


def _count(home: Path, table: str) -> int:
    with sqlite3.connect(home / "registry.db") as db:
        return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_hit_path_never_imports_tvm(home, tuned):
    """A registry hit must stay cheap: the CLI answers it without importing TVM at all."""
    import sys

    code = (
        "import sys\n"
        "from farm.cli.app import app\n"
        "try:\n"
        "    app(['submit', 'mlp-tiny', 'llvm', '2', '--json'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print('TVM_IMPORTED' if any(m == 'tvm' or m.startswith('tvm.') for m in sys.modules) else 'NO_TVM')\n"
    )
    env = {**os.environ, "FARM_HOME": str(home)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"cache_hit": true' in proc.stdout
    assert proc.stdout.strip().endswith("NO_TVM")


def test_registry_export_and_import_tvm_logs(home, tuned, tmp_path):
    """TVM's JSON database format out of one registry and into a fresh one, via the CLI."""
    out = tmp_path / "logs"
    exported = json.loads(farm_here(home, "registry", "export", str(out), "--json").stdout)
    assert exported["records"] >= tuned["trials"] and exported["workloads"] >= 2
    assert (out / "database_workload.json").exists() and (out / "database_tuning_record.json").exists()
    fresh = tmp_path / "fresh-home"
    imported = json.loads(farm_here(fresh, "registry", "import", str(out), "--json").stdout)
    assert imported["records"] == exported["records"] and imported["skipped_duplicates"] == 0
    again = json.loads(farm_here(fresh, "registry", "import", str(out), "--json").stdout)
    assert again["records"] == 0 and again["skipped_duplicates"] == exported["records"]
    # A broken log is refused whole: nothing is written.
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "database_workload.json").write_text((out / "database_workload.json").read_text())
    (bad / "database_tuning_record.json").write_text("[0, not json\n")
    proc = farm_here(fresh, "registry", "import", str(bad), check=False)
    assert proc.returncode != 0 and "database_tuning_record.json" in proc.stderr
    assert _count(fresh, "tuning_records") == exported["records"]


def test_a_budget_below_the_tasks_that_matter_warns_about_untuned_tasks(farm_exe, tmp_path):
    """mlp-tiny has 2 tasks that matter; the plan gives 1 trial to the larger (MetaSchedule's own
    round robin gave 4 trials at 4 per round to the first task in its order, whatever its size)."""
    proc = farm(farm_exe, tmp_path / "home", "submit", "mlp-tiny", "llvm", "1", "--trials", "1", "--runs", "2")
    assert "planned    1 of 1 trials over 2 tasks" in proc.stderr
    assert "1 of 2 tasks got no trials (budget 1 is too small for them)" in proc.stdout


def _damage_every_library(home: Path) -> None:
    with sqlite3.connect(home / "registry.db") as db:
        for (art_id,) in db.execute("SELECT id FROM artifacts").fetchall():
            db.execute("UPDATE artifacts SET library = ? WHERE id = ?", (b"\x7fELF broken", art_id))


def test_corrupt_artifact_is_refused(farm_exe, home, tuned):
    _damage_every_library(home)
    proc = farm(farm_exe, home, "run", "mlp-tiny", "llvm", "2", check=False)
    assert proc.returncode != 0
    assert "corrupt" in proc.stderr and "--retune" in proc.stderr
    assert proc.stdout == ""



def test_a_corrupt_artifact_is_never_a_hit_again(farm_exe, home, tuned):
    """Every stored library damaged: submit no longer answers with one (it was 'succeeded (registry
    hit)' before), marks them invalid, and tunes again."""
    _damage_every_library(home)
    damaged = {row[0] for row in _rows(home, "SELECT id FROM artifacts")}
    proc = farm(farm_exe, home, "submit", "mlp-tiny", "llvm", "2", *TUNE, "--json")
    again = json.loads(proc.stdout)
    assert again["cache_hit"] is False and again["state"] == "succeeded"
    assert again["artifact"]["id"] not in damaged
    invalid = _rows(home, "SELECT id, invalid_reason FROM artifacts WHERE invalidated_at IS NOT NULL")
    assert {row[0] for row in invalid} == damaged
    assert all("does not match the one validated" in row[1] for row in invalid)
    ran = json.loads(farm(farm_exe, home, "run", "mlp-tiny", "llvm", "2", "--runs", "2", "--json").stdout)
    assert ran["artifact"] == again["artifact"]["id"]
    hit = json.loads(farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--json").stdout)
    assert hit["cache_hit"] is True and hit["artifact"]["id"] == again["artifact"]["id"]


def _rows(home: Path, sql: str) -> list:
    with sqlite3.connect(home / "registry.db") as db:
        return db.execute(sql).fetchall()


def test_report_plots_the_tuned_job(home, tuned, tmp_path):
    out = tmp_path / "report"
    made = json.loads(farm_here(home, "report", tuned["job"], "--out", str(out), "--json").stdout)
    png, page = Path(made["png"]), Path(made["markdown"])
    assert png.parent == out and png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and png.stat().st_size > 10_000
    assert made["trials"] == tuned["trials"]
    assert sorted(t["task"] for t in made["tasks"]) == sorted(t["task"] for t in tuned["tasks"])
    assert all(t["best_ms"] and t["best_ms"] > 0 for t in made["tasks"])
    assert made["estimated_latency_ms"] > 0
    text = page.read_text()
    assert f"![best latency against trials]({png.name})" in text and tuned["artifact"]["id"] in text
    assert "the tuner's task list" in text  # names and weights, not bare workload ids
    assert "| reuse | reused none of 2 tasks: none has measured records here yet |" in text
    for task in tuned["tasks"]:
        assert f"| {task['task']} |" in text
    # What TVM's C++ code wrote while tuning went to the job's log, not to the console.
    assert (home / "jobs" / tuned["job"] / "logs" / "tvm.log").is_file()

    # A registry hit tuned nothing: its report points at the job that did; --report follows it.
    hit = json.loads(farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--json").stdout)
    refused = farm_here(home, "report", hit["job"], "--out", str(out), check=False)
    assert refused.returncode == 3 and refused.stderr.count("\n") == 1
    assert "answered from the registry" in refused.stderr and "farm report" in refused.stderr
    again = json.loads(farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--report", str(tmp_path / "r2"),
                                 "--json").stdout)
    assert again["cache_hit"] and Path(again["report"]["png"]).is_file()
    assert again["report"]["job"] == again["artifact"]["job_id"]


def test_listings_read_like_kubectl(home, tuned):
    jobs = farm_here(home, "jobs").stdout.splitlines()
    assert jobs[0].split() == ["JOB", "STATE", "MODEL", "BATCH", "TARGET", "TRIALS", "FINGERPRINT", "AGE", "STATUS"]
    row = next(line for line in jobs if line.startswith(tuned["job"]))
    assert "mlp-tiny" in row and "llvm" in row and f"{tuned['trials']}/" in row
    # Columns line up: each header starts where its values start.
    starts = [jobs[0].index(word) for word in ("STATE", "MODEL", "FINGERPRINT")]
    assert all(row[start - 1] == " " and row[start] != " " for start in starts)
    listing = farm_here(home, "registry", "ls").stdout
    assert tuned["artifact"]["id"] in listing and "VALIDATED" in listing
    for text in ("\n".join(jobs), listing):
        assert "None" not in text and "{'" not in text


def test_version(tmp_path):
    lines = farm_here(tmp_path / "home", "--version").stdout.splitlines()
    names = [line.split()[0] for line in lines]
    assert names[:3] == ["farm", "TVM", "LLVM"] and "Python" in names
    assert lines[0].split()[1] == "0.1.0" and "0.27" in lines[1]
