"""`farm registry import` / `export` of hostile logs through the CLI: every refusal is one line and a
documented exit code, and leaves the registry (or its absence) and the export directory as they were."""

from __future__ import annotations

import json

import pytest

from foundation.meta_schedule.database.tvm_logs import RECORD_FILE, WORKLOAD_FILE
from foundation.registry import RegistryStore
from foundation.registry.engine import RegistryMissing

from support.farm_inprocess import run_farm_inprocess
from support.farm_process import one_error_line
from support.tvm_logs import small_tvm_log, with_run_secs


def farm(tmp_path, *args):  # type: ignore[no-untyped-def]
    return run_farm_inprocess(*map(str, args), home=tmp_path / "home")


def assert_no_registry(url: str) -> None:
    with pytest.raises(RegistryMissing):
        RegistryStore(url, create=False)


def counts(url: str) -> dict[str, int]:
    store = RegistryStore(url, create=False)
    try:
        return store.counts()
    finally:
        store.dispose()


@pytest.mark.parametrize("run_secs", ["[-1.0]", "[NaN]", "[Infinity]", "[]", "[null]"])
def test_impossible_run_times_refuse_the_import(tmp_path, run_secs):
    log = small_tvm_log(tmp_path / "log")
    with_run_secs(log / RECORD_FILE, 2, run_secs)
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    proc = farm(tmp_path, "registry", "import", log, "--registry", url)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert f"{log / RECORD_FILE}:2: its run_secs " in line and "nothing was imported" in line
    assert_no_registry(url)


@pytest.mark.parametrize(("name", "content", "reason"), [
    (WORKLOAD_FILE, b"\xff\xfe", "not UTF-8 text"),
    (RECORD_FILE, b"[" * 100_000 + b"]" * 100_000 + b"\n", "(nested too deeply)"),
])
def test_lines_python_cannot_read_are_bad_input(tmp_path, name, content, reason):
    log = small_tvm_log(tmp_path / "log")
    (log / name).write_bytes(content)
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    proc = farm(tmp_path, "registry", "import", log, "--registry", url)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert f"{log / name}:1: " in line and reason in line, line
    assert_no_registry(url)


def test_a_refused_import_creates_no_registry(tmp_path, registry_url):
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / WORKLOAD_FILE).write_text("garbage\n")
    (garbage / RECORD_FILE).write_text("garbage\n")
    (tmp_path / "empty").mkdir()
    good = small_tvm_log(tmp_path / "good", target=None)

    refused = farm(tmp_path, "registry", "import", garbage, "--registry", registry_url)
    assert refused.returncode == 2 and "nothing was imported" in one_error_line(refused.stderr)
    missing = farm(tmp_path, "registry", "import", tmp_path / "empty", "--registry", registry_url)
    assert missing.returncode == 3 and "no TVM tuning log" in one_error_line(missing.stderr)
    unknown = farm(tmp_path, "registry", "import", good, "--fingerprint", "cpu-nonexist", "--registry", registry_url)
    assert unknown.returncode == 3, unknown.stderr
    assert one_error_line(unknown.stderr).startswith("error: fingerprint 'cpu-nonexist' is not in the registry")
    assert_no_registry(registry_url)

    # A log it takes creates the registry, this box's fingerprint in it.
    taken = farm(tmp_path, "registry", "import", good, "--registry", registry_url, "--json")
    assert taken.returncode == 0, taken.stderr
    assert json.loads(taken.stdout)["records"] == 2
    assert (counts(registry_url)["fingerprints"], counts(registry_url)["tuning_records"]) == (1, 2)


def test_a_refused_import_writes_nothing_into_a_registry(tmp_path, registry_url):
    assert farm(tmp_path, "registry", "init", "--registry", registry_url).returncode == 0
    log = small_tvm_log(tmp_path / "log")
    with_run_secs(log / RECORD_FILE, 1, "[-1.0]")
    refused = farm(tmp_path, "registry", "import", log, "--registry", registry_url)
    assert refused.returncode == 2, refused.stderr
    unknown = farm(tmp_path, "registry", "import", log, "--fingerprint", "cpu-nonexist", "--registry", registry_url)
    assert unknown.returncode == 3, unknown.stderr
    assert not any(counts(registry_url).values())


def test_export_replaces_both_logs_or_neither(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    log = small_tvm_log(tmp_path / "log", target=None)
    assert farm(tmp_path, "registry", "import", log, "--registry", url).returncode == 0
    out = tmp_path / "exp6"
    (out / RECORD_FILE).mkdir(parents=True)
    (out / WORKLOAD_FILE).write_text("old\n")
    proc = farm(tmp_path, "registry", "export", out, "--registry", url)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot write the logs into {out / RECORD_FILE}: Is a directory" in one_error_line(proc.stderr)
    assert sorted(p.name for p in out.iterdir()) == [RECORD_FILE, WORKLOAD_FILE]
    assert (out / WORKLOAD_FILE).read_text() == "old\n"

    (out / RECORD_FILE).rmdir()
    proc = farm(tmp_path, "registry", "export", out, "--registry", url, "--json")
    assert proc.returncode == 0, proc.stderr
    assert (json.loads(proc.stdout)["records"], sorted(p.name for p in out.iterdir())) == (
        2, [RECORD_FILE, WORKLOAD_FILE])
