"""Run a command inside this process group, and take the whole group down when our parent dies.

TVM's tracker and RPC server fork trees of processes in their own group. If the farm process
that started them is SIGKILLed it cannot stop them, and an orphaned RPC server would stay
registered with the tracker. This guard leads the group: the kernel signals it when its
parent dies (PR_SET_PDEATHSIG), and it then kills every process of the group.

    python -m foundation.processes.group_guard PARENT_PID -- COMMAND ...

A zygote that has imported what the command needs forks the guard instead (`Zygote.start_group`
in foundation.meta_schedule.forked_workers), which runs `lead_forked_group`: the guard forks the
command.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable

from foundation.processes.forked_process import write_exit_code

_PR_SET_PDEATHSIG = 1


def _take_group_down(*_args) -> None:
    os.killpg(0, signal.SIGKILL)  # this process included


def lead(parent: int, run_command: Callable[[], int]) -> int:
    """Guard this process's group for as long as ``run_command`` runs; its exit code, or 1 when
    ``parent`` (this process's parent) is already gone."""
    signal.signal(signal.SIGTERM, _take_group_down)
    signal.signal(signal.SIGINT, _take_group_down)
    # A parent that started us with both blocked (a zygote does) must not keep them from the guard.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the group is still stopped by ProcessGroup.stop
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        return 1
    return run_command()


def lead_forked_group(parent: int, module_argv: list[str], output: int, status: int) -> None:
    """In a process just forked by ``parent``: lead a new process group, as `main` does, with the
    command ``module_argv`` (``python -m``'s arguments: the module, then its own) run in a fork of
    this process, writing to ``output``; its exit code goes to ``status`` (ForkedGroupLeader).
    Never returns."""
    code = 1
    try:
        os.setpgid(0, 0)  # a group of its own, as start_new_session gives the exec'd guard
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote's handler reaps the zygote's children
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        for fd in (null, output):
            os.close(fd)
        os.set_inheritable(status, False)
        code = lead(parent, lambda: _run_forked(module_argv, status))
    finally:
        write_exit_code(status, code)
        os._exit(code & 0xFF)


def _run_forked(module_argv: list[str], status: int) -> int:
    """``python -m`` ``module_argv`` in a fork of this process; its exit code."""
    pid = os.fork()
    if pid:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    code = 1
    try:
        os.close(status)  # only the guard reports how the group ended
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # The forking process's streams may be anything (a log file's, pytest's); the command's are
        # its descriptors 1 and 2, line by line, as `python -u` gives ProcessGroup's readers.
        sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
        sys.argv = list(module_argv)
        try:
            runpy.run_module(module_argv[0], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit:
            if exit.code is None or isinstance(exit.code, int):
                code = exit.code or 0
            else:
                print(exit.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code & 0xFF)


def main() -> int:
    parent = int(sys.argv[1])
    command = sys.argv[sys.argv.index("--") + 1:]
    return lead(parent, lambda: subprocess.Popen(command).wait())


if __name__ == "__main__":
    sys.exit(main())
