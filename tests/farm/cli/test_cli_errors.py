"""Bad input: one line on stderr saying what is wrong and what to do, non-zero exit, registry unchanged.

The commands run in this process through the real `farm` script (support.farm_inprocess): the same
error boundary, exit codes and stdout/stderr as a subprocess, without its start-up. Tests whose
subject needs a process of its own (a package hidden from the interpreter, CUDA's first probe)
start one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support.farm_inprocess import run_farm_inprocess


def farm(home: Path, *args: str) -> subprocess.CompletedProcess:
    return run_farm_inprocess(*args, home=home)


def farm_process(exe: str, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=300)


def assert_refused(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode not in (0, None), proc
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{proc.stderr}"
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert proc.stdout == ""


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


def test_unknown_model_lists_known_ones(home):
    proc = farm(home, "submit", "resnet-19", "llvm", "1")
    assert_refused(proc, "unknown model 'resnet-19'", "resnet-18", "bert")
    assert not (home / "registry.db").exists()


def test_unknown_target(home):
    proc = farm(home, "submit", "mlp-tiny", "tpu", "1")
    assert_refused(proc, "unknown target 'tpu'")
    assert not (home / "registry.db").exists()


def test_batch_below_one(home):
    proc = farm(home, "submit", "mlp-tiny", "llvm", "0")
    assert_refused(proc, "batch must be at least 1")
    assert not (home / "registry.db").exists()


def test_missing_onnx_file(home, tmp_path):
    proc = farm(home, "submit", str(tmp_path / "nope.onnx"), "llvm", "1")
    assert_refused(proc, "no such ONNX file")
    assert not (home / "registry.db").exists()


def test_broken_onnx_file_leaves_registry_unchanged(home, tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"this is not a protobuf \x00\x01\x02" * 10)
    proc = farm(home, "submit", str(broken), "llvm", "1")
    assert_refused(proc, "broken.onnx")
    ls = farm(home, "registry", "ls", "--json")
    if ls.returncode == 0:  # the registry may exist (empty); nothing may be in it
        import json

        counts = json.loads(ls.stdout)["counts"]
        assert all(n == 0 for n in counts.values()), counts


def test_unreachable_registry(home):
    proc = farm(home, "submit", "mlp-tiny", "llvm", "1", "--registry", "postgresql://farm@127.0.0.1:1/farm")
    assert_refused(proc, "cannot reach the registry", "127.0.0.1:1")


def test_run_without_artifact_says_to_submit(home):
    proc = farm(home, "run", "mlp-tiny", "llvm", "4")
    assert_refused(proc, "no tuned library", "farm submit mlp-tiny llvm 4")


def test_cuda_without_a_gpu(farm_exe, home):
    if Path("/dev/nvidia0").exists():
        pytest.skip("this machine has a GPU")
    # A process of its own: what CUDA's first probe writes on native stderr, it writes once per process.
    proc = farm_process(farm_exe, home, "submit", "mlp-tiny", "cuda", "1")
    assert_refused(proc, "CUDA")


# -- every malformed input: its exit code, one line on stderr, and with --json a JSON document ---------

# (arguments, exit code, what the line says); {tmp} is the test's directory, where nothing exists but
# the FIFO a case names fifo.npy.
BAD_INPUT = [
    (["submit", "resnet-19", "llvm", "1"], 2, "unknown model 'resnet-19'"),
    (["submit", "mlp-tiny", "tpu", "1"], 2, "unknown target 'tpu'"),
    (["submit", "mlp-tiny", '{"kind":"llvm"', "1"], 2, "malformed JSON"),
    (["submit", "mlp-tiny", "[" * 2000 + "]" * 2000, "1"], 2, "nested too deeply"),  # was RecursionError, exit 70
    (["submit", "mlp-tiny", '{"kind":"llvm","mcpu":"bogus9"}', "1"], 2, "LLVM does not know the CPU 'bogus9'"),
    # TVM rejected it once the job had started: a failed job was stored for a typo.
    (["submit", "mlp-tiny", '{"kind":"llvm","foo":"bar"}', "1"], 2, "target attribute 'foo' is not one TVM's"),
    (["submit", "mlp-tiny", "llvm", "0"], 2, "batch must be at least 1"),
    (["submit", "mlp-tiny", "llvm", "x"], 2, "invalid value for 'BATCH'"),
    (["submit"], 2, "missing argument 'MODEL'"),
    (["submit", "mlp-tiny", "llvm", "1", "--bogus"], 2, "no such option: --bogus"),
    (["submit", "mlp-tiny", "llvm", "1", "--trials", "0"], 2, "invalid value for '--trials'"),
    (["submit", "mlp-tiny", "llvm", "1", "--reuse", "sometimes"], 2, "invalid value for '--reuse'"),
    (["submit", "{tmp}/nope.onnx", "llvm", "1"], 3, "no such ONNX file"),
    (["submit", "mlp-tiny", "llvm", "1", "--registry", "postgresql://h:notaport/db"], 2, "is not a registry URL"),
    (["submit", "mlp-tiny", "llvm", "1", "--registry", "mysql://u@h/db"], 2, "unsupported registry URL scheme"),
    (["submit", "mlp-tiny", "llvm", "1", "--registry", "sqlite://"], 2, "is in memory"),
    (["submit", "mlp-tiny", "llvm", "1", "--registry", "sqlite:///{tmp}"], 2, "is a directory"),
    (["submit", "mlp-tiny", "llvm", "1", "--registry", "postgresql://farm@127.0.0.1:1/farm"], 4,
     "cannot reach the registry"),
    (["registry", "ls", "--registry", "sqlite:///{tmp}/missing/registry.db"], 3, "no registry at"),
    (["registry", "import", "{tmp}/missing"], 3, "no such directory"),
    (["run", "mlp-tiny", "llvm", "2", "--output", "{tmp}/missing/y.npy"], 3, "the directory of --output"),
    (["run", "mlp-tiny", "llvm", "2", "--output", "{tmp}/y.txt"], 2, "must end in .npy"),
    # Checked after the job had tuned, built and stored its library: the result was lost behind the error.
    (["submit", "mlp-tiny", "llvm", "1", "--report", "/proc/x"], 2, "cannot create the report directory /proc/x"),
    (["submit", "mlp-tiny", "llvm", "1", "--report", "/dev/null"], 2, "--report /dev/null is not a directory"),
    (["run", "mlp-tiny", "llvm", "2", "--input", "{tmp}/x.npy"], 3, "no such input file"),
    # A device or a FIFO was "no such file" (3); a FIFO as --output hung once the model had run.
    (["run", "mlp-tiny", "llvm", "2", "--input", "/dev/null"], 2, "--input /dev/null is not a regular file"),
    (["run", "mlp-tiny", "llvm", "2", "--output", "{tmp}/fifo.npy"], 2, "fifo.npy is not a regular file"),
    (["submit", "/dev/null", "llvm", "1"], 2, "/dev/null is not a regular file (a device, FIFO or socket)"),
    (["status", "job-nope"], 3, "no registry at"),
    (["cancel", "job-nope"], 3, "no registry at"),
    (["jobs", "--limit", "0"], 2, "invalid value for '--limit'"),
    (["jobs", "--coordinator", "127.0.0.1:1"], 4, "cannot reach the coordinator"),
    (["fingerprint", "--target", "tpu"], 2, "unknown target 'tpu'"),
    (["coordinator", "--lease-ttl", "1", "--heartbeat-interval", "5"], 2, "--lease-ttl 1 must exceed"),
    # Accepted before: --records-per-report goes to agents as a uint32 (10^20 failed every lease).
    (["coordinator", "--max-attempts", "100000000000000000000"], 2, "--max-attempts must be 1 to 100"),
    (["coordinator", "--records-per-report", "100000000000000000000"], 2, "--records-per-report must be 1 to 10,000"),
    # NaN was "should be ≤ 3600"; infinity passed where there is no upper bound.
    (["coordinator", "--heartbeat-interval", "nan"], 2,
     "'--heartbeat-interval' (env var: 'FARM_COORDINATOR_HEARTBEAT_INTERVAL'): must be a finite number, got nan"),
    (["coordinator", "--report-rate", "inf"], 2,
     "'--report-rate' (env var: 'FARM_COORDINATOR_REPORT_RATE'): must be a finite number, got inf"),
    (["coordinator", "--grace", "-inf"], 2,
     "'--grace' (env var: 'FARM_COORDINATOR_GRACE'): must be a finite number, got -inf"),
    (["submit", "mlp-tiny", "llvm", "1", "--timeout", "nan"], 2,
     "'--timeout' (env var: 'FARM_SUBMIT_TIMEOUT'): must be a finite number"),
    (["cancel", "job-x", "--wait", "inf"], 2, "'--wait' (env var: 'FARM_CANCEL_WAIT'): must be a finite number"),
    # It named --listen.
    (["coordinator", "--health-listen", "nowhere"], 2,
     "cannot listen on nowhere (--health-listen): it is not host:port"),
    (["no-such-command"], 2, "no such command"),
]


@pytest.mark.parametrize("args, code, needle", BAD_INPUT, ids=[" ".join(a)[:60] for a, _, _ in BAD_INPUT])
def test_bad_input_is_one_line_with_its_exit_code(home, tmp_path, args, code, needle):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if any(a.endswith("fifo.npy") for a in args):
        os.mkfifo(tmp_path / "fifo.npy")
    proc = farm(home, *args)
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert_refused(proc, needle)
    assert "Traceback" not in proc.stderr
    assert not home.exists() or not (home / "registry.db").exists(), "bad input created a registry"
    as_json = farm(home, *args, "--json")
    assert as_json.returncode == code
    document = json.loads(as_json.stdout)
    assert document["exit_code"] == code and needle in document["error"] and document["hint"]
    assert len([line for line in as_json.stderr.splitlines() if line.strip()]) == 1


def test_tuning_for_instructions_this_cpu_lacks_is_refused(home):
    from tvm.target import Target, codegen

    from foundation.hardware.fingerprint import local_fingerprint

    have = set(local_fingerprint("llvm").details["features"])
    candidates = [cpu for cpu in ("sapphirerapids", "graniterapids", "znver4", "skylake-avx512")
                  if "amx-tile" in codegen.llvm_get_cpu_features(Target({"kind": "llvm", "mcpu": cpu}))]
    if "amx_tile" in have or not candidates:
        pytest.skip("this CPU has AMX: no x86 mcpu here needs instructions it lacks")
    proc = farm(home, "submit", "mlp-tiny", json.dumps({"kind": "llvm", "mcpu": candidates[0]}), "1")
    assert proc.returncode == 2
    assert_refused(proc, "this CPU", "lacks", "amx_tile", "--coordinator")
    assert not (home / "registry.db").exists()


def test_tuning_for_another_architecture_is_refused(home):
    import platform

    other = "aarch64" if platform.machine().lower() in ("x86_64", "amd64") else "x86_64"
    proc = farm(home, "submit", "mlp-tiny", json.dumps({"kind": "llvm", "mtriple": f"{other}-linux-gnu"}),
                "1")
    assert proc.returncode == 2
    assert_refused(proc, f"code for {other}", "cannot run on this", "--coordinator")
    assert not (home / "registry.db").exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["--until", "fast"], "--until 'fast' is neither onnxruntime nor a latency"),
    (["--until", "20"], "--until '20' is neither onnxruntime nor a latency"),
    (["--until", "0ms"], "must be a latency above zero"),
    (["--until", "-3ms"], "is neither onnxruntime nor a latency"),
    (["--patience", "2"], "--patience and --round-trials only apply with --until"),
])
def test_bad_until_is_refused_before_anything_is_written(home, args, needle):
    proc = farm(home, "submit", "mlp-tiny", "llvm", "1", *args)
    assert proc.returncode == 2
    assert_refused(proc, needle)
    assert not (home / "registry.db").exists()


def test_until_onnxruntime_without_onnxruntime_is_one_line(farm_exe, home, tmp_path):
    # onnxruntime is the optional 'reference' extra; the test venv has it, so this hides it the
    # way a missing package looks to Python: its import fails.
    hidden = tmp_path / "hidden"
    (hidden / "onnxruntime").mkdir(parents=True)
    (hidden / "onnxruntime" / "__init__.py").write_text("raise ImportError('No module named onnxruntime')\n")
    env = {**os.environ, "FARM_HOME": str(home), "PYTHONPATH": str(hidden)}
    env.pop("FARM_REGISTRY", None)
    proc = subprocess.run([farm_exe, "submit", "mlp-tiny", "llvm", "1", "--until", "onnxruntime"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert_refused(proc, "--until onnxruntime needs onnxruntime, which is not installed", "tvm-farm[reference]")
    assert not (home / "registry.db").exists()


def test_what_a_coordinator_does_not_have_is_one_line_with_one_hint(home, tmp_path):
    from coordinator.server import serve

    server = serve(listen="127.0.0.1:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}",
                   tracker="127.0.0.1:9190", data_dir=tmp_path / "coordinator")
    try:
        for command in ("status", "cancel"):
            proc = farm(home, command, "job-nope", "--coordinator", server.address)
            assert_refused(proc, "no job 'job-nope'", "`farm jobs`")
            assert proc.returncode == 3 and proc.stderr.count("(see ") == 1, proc.stderr
    finally:
        server.stop(grace=1)


def test_an_onnx_file_too_large_to_send_is_refused_before_it_is_read(home, tmp_path):
    """gRPC's own "Sent message larger than max" was all a user learnt, after the file was read."""
    from coordinator.server import serve
    from foundation.wire import MAX_MESSAGE_BYTES

    big = tmp_path / "big.onnx"
    with big.open("wb") as sparse:  # no disk used: only its size is looked at
        sparse.truncate(MAX_MESSAGE_BYTES + 1)
    server = serve(listen="127.0.0.1:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}",
                   tracker="127.0.0.1:9190", data_dir=tmp_path / "coordinator")
    try:
        proc = farm(home, "submit", str(big), "llvm", "1", "--coordinator", server.address, "--no-wait")
        assert proc.returncode == 2, proc.stderr
        assert_refused(proc, "big.onnx is 256.0 MiB", "at most 255.9 MiB", "without --coordinator")
    finally:
        server.stop(grace=1)


@pytest.mark.parametrize("args", [["models"], ["fingerprint"], ["fingerprint", "--json"]], ids=" ".join)
def test_a_reader_that_closed_stdout_ends_the_command_with_141_not_the_failed_jobs_1(farm_exe, home, args):
    """`farm ... | head -1`: the reader's choice, not a failure; typer and rich ended it with 1."""
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    proc = subprocess.Popen([farm_exe, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # before the command writes: its first write meets a closed pipe
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
