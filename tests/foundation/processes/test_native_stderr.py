"""TVM's C++ warnings go to a file while fd 2 is redirected; the terminal stream still reaches the console."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from foundation.processes.native_stderr import (
    native_stderr_to,
    process_stderr_kept,
    terminal_stderr,
    worker_stderr,
)


def pool_design_space() -> int:
    """MetaSchedule's design space of a max-pool, whose block names the schedule rule
    "meta_schedule.pool_max", which CPU targets lack: TVM's C++ code warns on stderr, as it
    does for every pooling task of a CNN."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm
    from tvm import te, topi
    from tvm.s_tir import meta_schedule as ms

    data = te.placeholder((1, 4, 8, 8), name="data")
    pooled = topi.nn.pool2d(data, kernel=(2, 2), stride=(2, 2), dilation=(1, 1), padding=(0, 0, 0, 0),
                            pool_type="max")
    mod = tvm.IRModule({"main": te.create_prim_func([data, pooled])})
    context = ms.TuneContext(mod=mod, target=tvm.target.Target({"kind": "llvm", "num-cores": 2}),
                             space_generator="post-order-apply", task_name="pool")
    return len(context.generate_design_space())


def test_tvm_warnings_go_to_the_file_and_progress_to_the_terminal(tmp_path, capfd):
    terminal = terminal_stderr()
    log = tmp_path / "logs" / "tvm.log"
    with native_stderr_to(log):
        assert pool_design_space() > 0
        terminal.write("progress for the terminal\n")
        terminal.flush()
    os.write(2, b"after: stderr is stderr again\n")
    terminal.close()
    err = capfd.readouterr().err
    assert "progress for the terminal" in err and "after: stderr is stderr again" in err
    assert "Unknown schedule rule" not in err
    text = log.read_text()
    assert 'Unknown schedule rule "meta_schedule.pool_max"' in text and "after:" not in text


def test_overlapping_redirections_share_the_first_file(tmp_path, capfd):
    """Two tuning runs in one process: the second writes into the first's file, and the
    terminal's stderr comes back only when both have ended."""
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    with native_stderr_to(first):
        with native_stderr_to(second):
            os.write(2, b"inner\n")
        os.write(2, b"still redirected\n")
    os.write(2, b"back\n")
    assert first.read_text() == "inner\nstill redirected\n" and not second.exists()
    assert capfd.readouterr().err == "back\n"


def test_a_thread_that_keeps_the_process_stderr_sends_only_its_workers_to_the_file(tmp_path, capfd):
    """A job in a library caller's background thread: fd 2 stays the caller's, and a worker started
    meanwhile writes its stderr to the job's log."""
    log = tmp_path / "logs" / "tvm.log"
    seen: list[int | None] = []

    def job() -> None:
        with process_stderr_kept(), native_stderr_to(log):
            os.write(2, b"the caller's line\n")
            job_log = worker_stderr()
            seen.append(job_log)
            try:
                subprocess.run([sys.executable, "-c", "import os; os.write(2, b'a worker line\\n')"],
                               stderr=job_log, check=True)
            finally:
                os.close(job_log)

    thread = threading.Thread(target=job)
    thread.start()
    thread.join()
    assert seen and seen[0] is not None
    assert worker_stderr() is None  # the job has ended: workers inherit fd 2 again
    assert capfd.readouterr().err == "the caller's line\n"
    assert log.read_text() == "a worker line\n"


def test_keeping_the_process_stderr_is_the_calling_threads_only(tmp_path, capfd):
    """Another thread's redirection (the CLI's tune) still points fd 2 at its file."""
    kept = threading.Event()
    release = threading.Event()

    def background() -> None:
        with process_stderr_kept():
            kept.set()
            release.wait(10)

    thread = threading.Thread(target=background)
    thread.start()
    kept.wait(10)
    with native_stderr_to(tmp_path / "tvm.log"):
        os.write(2, b"redirected\n")
    release.set()
    thread.join()
    assert (tmp_path / "tvm.log").read_text() == "redirected\n"
    assert capfd.readouterr().err == ""
