"""A command run as the leader of its own process group, stopped together with all it started."""

from __future__ import annotations

import atexit
import collections
import logging
import os
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Protocol, TextIO

import psutil

# TVM's RPC server is a tree: it forks one child per session (TVM's own entry points,
# `python -m tvm.exec.rpc_server` and `rpc_tracker`, add a PopenWorker process holding the listen
# thread). Signalling only the leader leaves the rest running; signalling the group reaches all of them.

_OUTPUT_LINES_KEPT = 40

_running: "weakref.WeakSet[ProcessGroup]" = weakref.WeakSet()


class Launched(Protocol):
    """What a launcher hands back of the group's leader: subprocess.Popen's pid, poll and wait."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


# A launcher: (the command, a descriptor for its output, its environment) -> its guard, leading a
# group of its own; ChildProcessError where it cannot start it.
Launcher = Callable[[list[str], int, dict[str, str]], Launched]


class ProcessGroup:
    """One started command and every process it forks, with its output forwarded to logging."""

    def __init__(self, argv: list[str], output_logger: logging.Logger, env: dict[str, str] | None = None,
                 *, die_with_parent: bool = True, launcher: Launcher | None = None):
        # With die_with_parent the group is led by foundation.processes.group_guard, which kills the group if
        # this process dies without stopping it (SIGKILL leaves no chance to clean up). A launcher starts
        # the command under such a guard in its own way (a fork of a zygote that has imported what the
        # command imports: Zygote.start_group); where it cannot, the command starts as a new process.
        self.command = list(argv)
        self.guarded = die_with_parent or launcher is not None
        self._launcher = launcher
        if self.guarded:
            argv = [sys.executable, "-m", "foundation.processes.group_guard", str(os.getpid()), "--", *argv]
        self.argv = list(argv)
        self._output_logger = output_logger
        self._env = env
        self._proc: subprocess.Popen | Launched | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=_OUTPUT_LINES_KEPT)
        self._reader: threading.Thread | None = None

    def start(self) -> "ProcessGroup":
        env = dict(os.environ if self._env is None else self._env)
        env.setdefault("PYTHONUNBUFFERED", "1")  # so a crash's last lines reach output_tail()
        launched = self._launch(env) if self._launcher is not None else None
        if launched is not None:
            self._proc, output = launched
        else:
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, env=env, text=True, errors="replace",
            )
            output = self._proc.stdout
        _running.add(self)
        # A reader thread instead of a file or an unread pipe: an unread pipe fills up and
        # blocks TVM's logging, which blocks its listen loop.
        self._reader = threading.Thread(target=self._forward_output, args=(output,),
                                        name=f"output-{self._proc.pid}", daemon=True)
        self._reader.start()
        return self

    def _launch(self, env: dict[str, str]) -> "tuple[Launched, TextIO] | None":
        """The command started by the launcher, and the read end of its output; None where the
        launcher cannot start it."""
        read, write = os.pipe()
        try:
            launched = self._launcher(self.command, write, env)
        except ChildProcessError:
            os.close(read)
            return None
        finally:
            os.close(write)  # the group holds the only write ends: its end is the output's end
        return launched, open(read, encoding="utf-8", errors="replace")

    @property
    def pid(self) -> int:
        """The leader's pid, which is also the group id."""
        if self._proc is None:
            raise RuntimeError("the process group was not started")
        return self._proc.pid

    @property
    def command_pid(self) -> int | None:
        """The pid of the command itself (below the guard when there is one)."""
        if not self.guarded:
            return self.pid
        try:
            children = psutil.Process(self.pid).children()
        except psutil.Error:
            return None
        return children[0].pid if children else None

    @property
    def exit_code(self) -> int | None:
        """The leader's exit code, or None while it runs (or before start)."""
        return None if self._proc is None else self._proc.poll()

    def output_tail(self) -> str:
        """The last lines the group wrote to stdout/stderr."""
        return "\n".join(self._tail)

    def descendants(self) -> list[psutil.Process]:
        """Live (non-zombie) processes below the leader."""
        try:
            found = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []
        return [p for p in found if is_live(p)]

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the whole group, SIGKILL it after ``grace`` seconds; idempotent."""
        if self._proc is None:
            return
        self._signal_group(signal.SIGTERM)
        self._signal_group(signal.SIGCONT)  # a stopped (SIGSTOP) member acts on SIGTERM only once continued
        try:
            self._proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        # Members that ignored SIGTERM, or outlived a leader that exited by itself.
        if self._group_members():
            self._signal_group(signal.SIGTERM)
            _wait_gone(self._group_members(), grace)
        self._signal_group(signal.SIGKILL)
        _wait_gone(self._group_members(), grace)
        try:
            self._proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            pass
        if self._reader is not None:
            self._reader.join(timeout=1.0)
        _running.discard(self)

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _group_members(self) -> list[psutil.Process]:
        members = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(proc.pid) == self.pid and is_live(proc):
                    members.append(proc)
            except (ProcessLookupError, psutil.Error):
                continue
        return members

    def _forward_output(self, stream) -> None:
        for line in stream:
            line = line.rstrip("\n")
            self._tail.append(line)
            self._output_logger.debug("%s", line)
        stream.close()


def is_live(proc: psutil.Process) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(procs: list[psutil.Process], timeout: float) -> None:
    if procs:
        psutil.wait_procs(procs, timeout=timeout)


@atexit.register
def _stop_all() -> None:
    # A caller that forgot stop() (or died on an exception outside a `with`) must not leave a
    # tracker or RPC server running after the interpreter exits.
    for group in list(_running):
        group.stop(grace=2.0)
