"""Builder and runner workers forked from one zygote that imported TVM: they build and time real
candidates, see the environment of their own start, are killed on a timeout and replaced, and
end with the process that made them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from foundation.config import FORK_WORKERS_ENV
from foundation.hardware.tvm_startup import LeanWorkerInit
from foundation.meta_schedule.forked_workers import (
    Zygote,
    forking_available,
    worker_pool,
    zygote_for,
)
from foundation.meta_schedule.measure import MeasureSettings, WorkerPools

pytestmark = pytest.mark.skipif(not forking_available(), reason="forked workers need Linux with pidfds")


def process_gone(pid: int, within: float = 10.0) -> bool:
    from support.polling import process_gone  # here, not at the top: workers import this module (_pid)

    return process_gone(pid, within)


def _pid() -> int:
    return os.getpid()


def test_tuning_workers_are_forks_of_the_zygote_and_build_and_time_a_candidate():
    import tvm

    from foundation.compile import extract_tuning_tasks
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.models.loading import load_model

    from support.tvm_records import build_and_time  # here: workers import this module to run _pid

    install_lean_tensor_intrinsics("llvm")
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    task = next(t for t in extract_tuning_tasks(load_model("mlp-tiny", 1), target) if "matmul" in t.name)
    zygote = zygote_for("llvm")
    # Workers of other pools of this process (an earlier test's, in this test worker) are not these.
    others = {w.pid for w in psutil.Process(zygote.process.pid).children()} if zygote.process else set()
    with WorkerPools(MeasureSettings(min_repeat_ms=1, build_workers=2)) as pools:
        builder, runner = pools.get("llvm")
        run_secs, _args = build_and_time(builder, runner, task.mod, target)
        assert len(run_secs) == 1 and run_secs[0] > 0

        zygote = zygote_for("llvm").process
        assert zygote is not None and zygote.poll() is None
        workers = [w for w in psutil.Process(zygote.pid).children() if w.pid not in others]
        # The builder's two workers (both started by prewarm) and the runner's one.
        assert len(workers) >= 3, [w.cmdline() for w in workers]
        mine = {c.pid for c in psutil.Process().children(recursive=True)}
        assert {w.pid for w in workers} <= mine
        assert not [c for c in psutil.Process().children() if "tvm.exec.popen_worker" in " ".join(c.cmdline())]
    # Closed pools leave no worker behind; the zygote waits for the next pools.
    assert all(process_gone(w.pid) for w in workers)
    assert zygote.poll() is None


@pytest.fixture
def own_zygote():
    """A zygote of the test's own (not the process's, which other tests' pools share), and a maker of
    one-worker pools on it; all stopped at the end."""
    zygote, pools = Zygote("llvm"), []

    def pool(timeout: float = 30):  # type: ignore[no-untyped-def]
        pools.append(worker_pool("llvm", zygote=zygote, max_workers=1, timeout=timeout,
                                 initializer=LeanWorkerInit("llvm")))
        return pools[-1]

    yield zygote, pool
    for made in pools:
        made.shutdown()
    zygote.close()


def test_a_worker_starts_with_the_environment_and_directory_of_its_start(own_zygote, tmp_path, monkeypatch):
    _zygote, pool = own_zygote
    first, second = pool(), pool()
    assert first.submit(_pid).result() > 0  # the zygote exists now, started with the old environment
    monkeypatch.setenv("FARM_TEST_WORKER_ENV", "set-after-the-zygote")
    monkeypatch.chdir(tmp_path)
    env, cwd = second.submit(lambda: (os.environ.get("FARM_TEST_WORKER_ENV"), os.getcwd())).result()
    assert (env, cwd) == ("set-after-the-zygote", str(tmp_path))


def _collector_state() -> tuple[int, tuple[int, int, int], bool]:
    import gc

    return gc.get_freeze_count(), gc.get_threshold(), "tvm" in sys.modules


def test_a_worker_inherits_the_zygotes_heap_frozen_and_collects_young_objects_rarely(own_zygote):
    # What the zygote imported (TVM, ~200,000 objects) is frozen before it forks: a worker's
    # collections skip it, instead of walking it and copying each page of it.
    from foundation.processes.heap import THRESHOLDS

    _zygote, pool = own_zygote
    frozen, thresholds, imported = pool().submit(_collector_state).result()
    assert imported and frozen > 100_000, frozen
    assert thresholds == THRESHOLDS


def test_a_timed_out_worker_is_killed_and_the_next_task_gets_a_new_one(own_zygote):
    zygote, pool = own_zygote
    timing_out = pool(timeout=1)
    first = timing_out.submit(_pid).result()
    with pytest.raises(TimeoutError):
        timing_out.submit(time.sleep, 60).result()
    assert process_gone(first)
    second = timing_out.submit(_pid).result()
    assert second != first and psutil.Process(second).ppid() == zygote.process.pid


def test_a_killed_zygote_takes_its_workers_and_is_started_again(own_zygote):
    zygote, pool = own_zygote
    workers = pool()
    worker = workers.submit(_pid).result()
    old = zygote.process.pid
    os.kill(old, signal.SIGKILL)
    assert process_gone(worker)  # PR_SET_PDEATHSIG, set by the worker's initializer
    with pytest.raises(ChildProcessError):  # the task that was on the dead worker's pipe
        workers.submit(_pid).result()
    again = workers.submit(_pid).result()
    assert again != worker and zygote.process.pid != old
    assert psutil.Process(again).ppid() == zygote.process.pid


def test_the_zygote_and_its_workers_end_with_the_process_that_made_them(tmp_path):
    script = textwrap.dedent("""
        import os, signal
        from foundation.hardware.tvm_startup import LeanWorkerInit
        from foundation.meta_schedule.forked_workers import worker_pool, zygote_for
        pool = worker_pool("llvm", max_workers=1, timeout=30, initializer=LeanWorkerInit("llvm"))
        worker = pool.submit(os.getpid).result()
        print(zygote_for("llvm").process.pid, worker, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert done.returncode == -signal.SIGKILL, done.stderr
    zygote, worker = (int(x) for x in done.stdout.split())
    assert process_gone(zygote) and process_gone(worker)


def test_a_stream_the_pool_discards_is_discarded_by_its_workers(capfd):
    def shout() -> None:
        os.write(2, b"a worker wrote this to stderr\n")

    for stderr, seen in ((subprocess.DEVNULL, False), (None, True)):
        pool = worker_pool("llvm", max_workers=1, timeout=30, stderr=stderr)
        try:
            pool.submit(shout).result()
        finally:
            pool.shutdown()
        assert ("a worker wrote this to stderr" in capfd.readouterr().err) is seen


def test_where_the_zygote_cannot_start_the_workers_are_tvms_own(monkeypatch, caplog):
    from foundation.meta_schedule import forked_workers

    monkeypatch.setattr(forked_workers, "ZYGOTE_MODULE", "foundation.no_such_module")
    zygote = Zygote("llvm")
    pool = worker_pool("llvm", zygote=zygote, max_workers=1, timeout=30)
    try:
        worker = pool.submit(_pid).result()
        assert zygote.failed and "did not start a worker twice" in caplog.text
        assert psutil.Process(worker).ppid() == os.getpid()
        assert "tvm.exec.popen_worker" in " ".join(psutil.Process(worker).cmdline())
    finally:
        pool.shutdown()
        zygote.close()


def test_switched_off_the_workers_are_tvms_own_processes(monkeypatch):
    monkeypatch.setenv(FORK_WORKERS_ENV, "0")
    pool = worker_pool("llvm", max_workers=1, timeout=30)
    try:
        worker = pool.submit(_pid).result()
        assert psutil.Process(worker).ppid() == os.getpid()
        assert "tvm.exec.popen_worker" in " ".join(psutil.Process(worker).cmdline())
    finally:
        pool.shutdown()
