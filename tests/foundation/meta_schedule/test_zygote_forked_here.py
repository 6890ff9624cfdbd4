"""A zygote forked from the process that imported TVM (forked_workers.fork_zygote_here): its workers
build and time real candidates, none of the parent's signals or threads go with it, it ends with the
parent; and where a thread not Python's runs, the zygote starts as a new Python instead.

Each case runs in a Python of its own: a pytest worker has threads of its own (execnet's, and TVM's
pool once a test ran a library), and a zygote forked from it would hold a copy of the whole worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from foundation.meta_schedule.forked_workers import forking_available

from support.polling import process_gone

pytestmark = pytest.mark.skipif(not forking_available(), reason="forked workers need Linux with pidfds")

ROOT = Path(__file__).resolve().parents[3]

# A matmul task of mlp-tiny, built and timed as tuning measures a candidate, by pools whose zygote is
# a fork of this process; the parent's signal wakeup fd set as `farm submit` sets it
# (farm.cli.interrupts), and read after the workers ended (each end is a SIGCHLD in the zygote).
MEASURE = """
import json, os, signal, socket, sys, time
import psutil
import tvm
from tvm.s_tir import meta_schedule as ms
from foundation.compile import extract_tuning_tasks
from foundation.meta_schedule.forked_workers import zygote_for, worker_pool
from foundation.meta_schedule.measure import MeasureSettings, WorkerPools
from foundation.hardware.tvm_startup import LeanWorkerInit, install_lean_tensor_intrinsics
from foundation.models.loading import load_model

install_lean_tensor_intrinsics("llvm")
target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
task = next(t for t in extract_tuning_tasks(load_model("mlp-tiny", 1), target) if "matmul" in t.name)
reader, writer = socket.socketpair()
writer.setblocking(False)
signal.signal(signal.SIGINT, lambda *_: None)
signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
me = psutil.Process()
with WorkerPools(MeasureSettings(min_repeat_ms=1, build_workers=2, zygote_forked_here=True)) as pools:
    builder, runner = pools.get("llvm")
    (built,) = builder.build([ms.builder.BuilderInput(task.mod, target)])
    assert built.error_msg is None, built.error_msg
    args = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
    (future,) = runner.run([ms.runner.RunnerInput(built.artifact_path, "cpu", args)])
    timed = future.result()
    assert timed.error_msg is None, timed.error_msg
    zygote = psutil.Process(zygote_for("llvm").process.pid)
    workers = zygote.children()
    seen = {
        "run_secs": [float(s) for s in timed.run_secs],
        "zygote_parent": zygote.ppid(), "me": os.getpid(),
        "zygote_cmdline_is_mine": zygote.cmdline() == me.cmdline(),
        "workers": len(workers),
        "workers_cmdline_are_mine": all(w.cmdline() == me.cmdline() for w in workers),
        "new_pythons": [p.cmdline() for p in me.children(recursive=True)
                        if {"foundation.meta_schedule.forked_workers", "tvm.exec.popen_worker"} & set(p.cmdline())],
    }
time.sleep(1.0)
reader.setblocking(False)
try:
    woken = list(reader.recv(64))
except BlockingIOError:
    woken = []
seen["wakeup_bytes"] = woken
pool = worker_pool("llvm", max_workers=1, timeout=30, initializer=LeanWorkerInit("llvm"))
seen["zygote"], seen["worker"] = zygote.pid, pool.submit(os.getpid).result()
print(json.dumps(seen), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _python(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))


def test_a_zygote_forked_from_the_process_builds_and_times_and_leaves_its_signals_and_ends_with_it():
    done = _python(MEASURE)
    assert done.returncode == -signal.SIGKILL, done.stderr
    seen = json.loads(done.stdout)
    assert len(seen["run_secs"]) == 1 and seen["run_secs"][0] > 0
    # A fork of this process, not a new Python: nothing under it started with `python -m`.
    assert seen["zygote_parent"] == seen["me"] and seen["zygote_cmdline_is_mine"]
    assert seen["workers"] >= 3 and seen["workers_cmdline_are_mine"]  # two builders, one runner
    assert seen["new_pythons"] == []
    # Its workers' ends did not reach the parent as signals.
    assert seen["wakeup_bytes"] == []
    assert process_gone(seen["zygote"]) and process_gone(seen["worker"])


def test_beside_a_thread_not_pythons_the_zygote_starts_as_a_new_python():
    # gRPC's threads, as an agent's channel starts them: a lock one of them holds would stay held
    # in a fork.
    done = _python("""
        import json, os
        import grpc
        import psutil
        from foundation.meta_schedule.forked_workers import fork_zygote_here, worker_pool, zygote_for
        from foundation.hardware.tvm_startup import LeanWorkerInit
        channel = grpc.insecure_channel("127.0.0.1:1")
        forked = fork_zygote_here("llvm")
        pool = worker_pool("llvm", max_workers=1, timeout=30, initializer=LeanWorkerInit("llvm"))
        worker = pool.submit(os.getpid).result()
        zygote = psutil.Process(zygote_for("llvm").process.pid)
        print(json.dumps({"forked": forked, "zygote": zygote.cmdline(), "worker_parent": psutil.Process(worker).ppid(),
                          "zygote_pid": zygote.pid}))
        pool.shutdown()
        channel.close()
    """)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["forked"] is False
    assert seen["zygote"][1:] == ["-m", "foundation.meta_schedule.forked_workers", "llvm", seen["zygote"][-1]]
    assert seen["worker_parent"] == seen["zygote_pid"]


def test_only_cpu_targets_fork_their_zygote_here_and_a_user_can_say_no():
    script = """
        import sys
        from foundation.meta_schedule.forked_workers import fork_zygote_here, zygote_for
        kind = sys.argv[1]
        print(fork_zygote_here(kind), zygote_for(kind).process, "tvm" in sys.modules)
    """
    gpu = subprocess.run([sys.executable, "-c", textwrap.dedent(script), "cuda"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    refused = subprocess.run([sys.executable, "-c", textwrap.dedent(script), "llvm"], capture_output=True,
                             text=True, timeout=60, cwd=ROOT, env=dict(os.environ, FARM_FORK_ZYGOTE="0"))
    for done in (gpu, refused):
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["False", "None", "False"]  # nothing forked, nor TVM imported for it
