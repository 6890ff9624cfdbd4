"""Ordinary mistakes through the CLI's one error boundary (farm.cli.app.main, in process): paths the
OS refuses, numbers out of bounds, bad files and addresses are one line naming the problem, with
exit 2 (or 3 for what does not exist), never 70, and nothing is written before they are refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from farm.cli.app import main

from support.tvm_logs import small_tvm_log


@pytest.fixture
def farm(monkeypatch, capsys, tmp_path):
    """Run `farm ARGS` in this process on a fresh farm home; (exit code, stdout, the stderr lines)."""
    home = tmp_path / "home"
    monkeypatch.setenv("FARM_HOME", str(home))
    monkeypatch.delenv("FARM_REGISTRY", raising=False)

    def run(*args: str) -> tuple[int, str, list[str]]:
        monkeypatch.setattr(sys, "argv", ["farm", *args])
        with pytest.raises(SystemExit) as exited:
            main()
        out, err = capsys.readouterr()
        return exited.value.code, out, [line for line in err.splitlines() if line.strip()]

    run.home = home
    return run


def refused(result, code: int, *needles: str) -> str:
    exit_code, _out, lines = result
    assert exit_code == code, (exit_code, lines)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_paths_the_os_refuses_are_bad_input_with_the_path(farm, tmp_path):
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    assert farm("registry", "init", "--registry", registry)[0] == 0
    line = refused(farm("registry", "export", "/proc/nope", "--registry", registry), 2, "/proc/nope")
    assert "internal error" not in line


def test_files_a_farm_reads_its_secrets_from_map_like_every_user_path(farm, tmp_path):
    # Refused before any call: no coordinator listens at this address.
    missing = tmp_path / "no-such-token"
    refused(farm("jobs", "--coordinator", "127.0.0.1:9", "--token-file", str(missing)), 3, str(missing),
            "does not exist")
    refused(farm("jobs", "--coordinator", "127.0.0.1:9", "--tls-ca", str(tmp_path / "ca.pem")), 3,
            str(tmp_path / "ca.pem"))
    refused(farm("jobs", "--coordinator", "127.0.0.1:9", "--tls-ca", str(tmp_path)), 2, str(tmp_path),
            "not a directory")
    (tmp_path / "binary-token").write_bytes(b"\xff\xfe")
    refused(farm("agent", "--coordinator", "127.0.0.1:9", "--token-file", str(tmp_path / "binary-token")), 2,
            "is not text")


def test_an_unwritable_report_directory_is_bad_input_with_the_path(farm, tmp_path):
    from foundation.domain.reuse import ReuseMode, TaskHistory, plan_reuse
    from foundation.registry import RegistryStore

    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    store = RegistryStore(registry, create=True)
    try:
        store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
        store.upsert_model(model_id="model-1", name="mlp", source="zoo", source_digest="v1", batch=1, inputs=[],
                           weights=[], num_parameters=1)
        # Every task reused, none measured: a job that reports without records (its note as a job writes it).
        reused = plan_reuse(ReuseMode.FULL, [TaskHistory("dense", 8)], 8, 8, 8).summary().to_json()
        job = store.create_job(model_id="model-1", target='{"kind":"llvm"}', fingerprint_id="cpu-aaaa",
                               trials_budget=0, options={"reused": reused}, state="succeeded")
    finally:
        store.dispose()
    refused(farm("report", job.id, "--out", "/proc", "--registry", registry), 2, "/proc/")
    refused(farm("report", job.id, "--out", "/proc/farm/reports", "--registry", registry), 2,
            "cannot create the report directory /proc/farm:", "nothing can be created there")


def test_numbers_are_bounded_before_anything_is_written(farm):
    refused(farm("submit", "mlp-tiny", "llvm", "99999999999999999999"), 2, "batch must be at most 4,096")
    refused(farm("submit", "mlp-tiny", "llvm", "1", "--trials", "99999999999999999999"), 2,
            "--trials must be 1 to 1,000,000")
    refused(farm("submit", "mlp-tiny", "llvm", "1", "--seed", "-1"), 2, "--seed must be 0 to 4,294,967,295")
    refused(farm("run", "mlp-tiny", "llvm", "1", "--runs", "99999999"), 2, "--runs must be 1 to 1,000,000")
    refused(farm("jobs", "--limit", "99999999999999999999"), 2, "--limit must be 1 to 10,000")
    # A negative batch is not an unknown option.
    line = refused(farm("submit", "mlp-tiny", "llvm", "-3"), 2, "batch must be a positive integer, not -3")
    assert "option" not in line
    assert not farm.home.exists() or not (farm.home / "registry.db").exists(), "bad input created a registry"


def test_the_daemons_numbers_are_bounded_before_they_start(farm):
    # Refused before any call (no coordinator listens at this address) and before anything listens.
    refused(farm("agent", "--coordinator", "127.0.0.1:9", "--build-workers", "99999999999"), 2,
            "--build-workers must be 1 to 1,024, got 99999999999")
    refused(farm("agent", "--coordinator", "127.0.0.1:9", "--device", "cuda:x"), 2,
            "--device 'cuda:x' is neither cpu nor cuda:N")
    refused(farm("agent", "--coordinator", "127.0.0.1:9", "--device", "tpu"), 2, "--device 'tpu'")
    refused(farm("agent", "--coordinator", "127.0.0.1:9", "--rpc-port", "99999"), 2, "--rpc-port")
    refused(farm("agent", "--coordinator", "127.0.0.1:9", "--grace", "nan"), 2,
            "'--grace' (env var: 'FARM_AGENT_GRACE'): must be a finite number, got nan")  # was "should be <= 3600"
    # Durations agents are told: infinite or huge, every registration failed (INTERNAL).
    for option in ("--lease-ttl", "--heartbeat-interval", "--report-within", "--grace"):
        refused(farm("coordinator", "--listen", "127.0.0.1:9", option, "inf"), 2, option)
    refused(farm("coordinator", "--listen", "127.0.0.1:9", "--heartbeat-interval", "1e300", "--lease-ttl", "1e301"),
            2, "--heartbeat-interval")


def test_bad_files_say_what_they_are(farm, tmp_path):
    (tmp_path / "x.onnx").mkdir()
    refused(farm("submit", str(tmp_path / "x.onnx"), "llvm", "1"), 2, "x.onnx is a directory, not an ONNX file")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x01 not a model at all" * 8)
    refused(farm("submit", str(garbage), "llvm", "1"), 2, "garbage.onnx")
    (tmp_path / "x.npy").write_bytes(b"this is no array")
    line = refused(farm("run", "mlp-tiny", "llvm", "1", "--input", str(tmp_path / "x.npy")), 2,
                   "x.npy is not a .npy file")
    assert "pickle" not in line
    (tmp_path / "dir.npy").mkdir()
    refused(farm("run", "mlp-tiny", "llvm", "1", "--input", str(tmp_path / "dir.npy")), 2, "is a directory")
    assert not farm.home.exists() or not (farm.home / "registry.db").exists(), "a bad file created a registry"


def test_an_npy_header_is_checked_against_the_file_before_the_array_is_read(farm, tmp_path):
    from numpy.lib import format as npy_format

    with (tmp_path / "huge.npy").open("wb") as file:  # 4 TB claimed, 64 bytes held
        npy_format.write_array_header_1_0(file, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
        file.write(b"\0" * 64)
    refused(farm("run", "mlp-tiny", "llvm", "1", "--input", str(tmp_path / "huge.npy")), 2,
            "huge.npy is damaged: its header says float32[1000000, 1000000], 4,000,000,000,000 bytes, "
            "but the file holds 64 bytes of data")
    (tmp_path / "bad.npy").write_bytes(npy_format.MAGIC_PREFIX + b"\x01\x00\x10\x00{'descr': nonsense")
    refused(farm("run", "mlp-tiny", "llvm", "1", "--input", str(tmp_path / "bad.npy")), 2,
            "cannot read --input", "its header is damaged")
    assert not farm.home.exists() or not (farm.home / "registry.db").exists(), "a bad file created a registry"


def test_invalid_target_attributes_are_refused_at_parse(farm):
    line = refused(farm("submit", "mlp-tiny", '{"kind":"llvm","mcpu":"znver4","num-cores":-4}', "1"), 2,
                   "target attribute num-cores must be an integer from 1 to 4096, got -4")
    assert "Traceback" not in line
    refused(farm("submit", "mlp-tiny", '{"kind":"llvm","mattr":"avx2"}', "1"), 2, "mattr must be a list of strings")
    assert not farm.home.exists() or not (farm.home / "registry.db").exists()


def test_a_read_only_sqlite_registry_says_so(farm, tmp_path):
    db = tmp_path / "registry.db"
    assert farm("registry", "init", "--registry", f"sqlite:///{db}")[0] == 0
    # Opened read-only (root ignores file modes), by the URI's own choice: no file's permissions are to blame.
    # A log the import takes: one it refuses is refused before anything is written.
    log = small_tvm_log(tmp_path / "log", target=None)
    line = refused(farm("registry", "import", str(log), "--registry", f"sqlite:///file:{db}?mode=ro&uri=true"),
                   4, "opened read-only (mode=ro in its URI)")
    assert "database server" not in line and "permissions" not in line and "drop mode=ro" in line


def test_listing_and_cancelling_on_a_fresh_box(farm, tmp_path):
    code, out, lines = farm("jobs", "--json")
    assert (code, json.loads(out), lines) == (0, [], [])
    code, out, lines = farm("jobs")
    assert (code, out, lines) == (0, "", ["no jobs yet: `farm submit` runs one"])
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    assert farm("registry", "init", "--registry", registry)[0] == 0
    line = refused(farm("cancel", "job-nope", "--registry", registry), 3, "job-nope", "`farm jobs`")
    assert "jobs list" not in line
    # Named and missing, the registry is a mistake to point out.
    refused(farm("jobs", "--registry", f"sqlite:///{tmp_path / 'missing.db'}"), 3, "no registry at")


def test_a_malformed_coordinator_address_is_bad_input(farm):
    refused(farm("jobs", "--coordinator", "bad host:1"), 2, "is not a host:port address")
    refused(farm("jobs", "--coordinator", "127.0.0.1:99999"), 2, "not one from 1 to 65535")
    refused(farm("jobs", "--coordinator", "127.0.0.1"), 2, "is not a host:port address")


def test_open_ports_without_a_token_are_warned_about():
    from foundation.wire.access import open_port_warnings

    (tracker, metrics) = open_port_warnings(None, tracker="0.0.0.0:9190", metrics="0.0.0.0:9464")
    assert tracker.startswith("warning: the TVM RPC tracker listens on 0.0.0.0:9190, beyond loopback")
    assert "metrics listens on 0.0.0.0:9464" in metrics and metrics.endswith("\n") and metrics.count("\n") == 1
    assert open_port_warnings(None, tracker="127.0.0.1:9190", metrics=None) == []
    assert open_port_warnings("a-token", tracker="0.0.0.0:9190") == []


def test_os_errors_map_to_exit_codes_with_the_path():
    import errno

    from foundation.errors import EXIT_BAD_INPUT, EXIT_NOT_FOUND, path_error

    cases = [
        (OSError(errno.EACCES, "Permission denied", "/srv/out"), EXIT_BAD_INPUT, "permissions"),
        (OSError(errno.EROFS, "Read-only file system", "/srv/out"), EXIT_BAD_INPUT, "read-only"),
        (OSError(errno.ENOENT, "No such file or directory", "/no/such/dir/out"), EXIT_NOT_FOUND, "does not exist"),
        (OSError(errno.ENOENT, "No such file or directory", "/proc/out"), EXIT_BAD_INPUT, "nothing can be created"),
    ]
    for err, code, fix in cases:
        mapped = path_error(err, doing="write")
        assert mapped.exit_code == code and str(Path(err.filename)) in mapped.problem and fix in mapped.fix


def test_outputs_to_a_path_the_os_refuses_are_bad_input_with_the_path():
    import numpy as np

    from farm.cli.run_files import write_outputs
    from foundation.errors import BadInput

    with pytest.raises(BadInput) as refused:
        write_outputs(Path("/proc/x.npy"), [np.zeros(2, dtype="float32")])
    assert "cannot write --output /proc/x.npy" in refused.value.problem
