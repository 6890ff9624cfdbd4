"""Processes another process forked for us (a zygote's), watched and signalled through a pidfd.

What subprocess.Popen gives its caller (pid, poll, wait, kill), for a process that is not this
process's child: a pidfd (Linux 5.3+) is its handle, so a reused pid is never mistaken for it.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import subprocess

_EXIT_CODE = struct.Struct("<i")


class ForkedProcess:
    """A process forked by another of ours. Its exit status belongs to the process that forked it,
    which lets the kernel reap it; here only its end is known."""

    # Until the pidfd is open: __del__ of one whose pidfd_open failed (out of open files) has none.
    _pidfd: int | None = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # already gone
            self._pidfd = None
            self.returncode = self._exit_status()

    def poll(self) -> int | None:
        return self.returncode if self._ended(0) else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(f"forked process {self.pid}", timeout or 0)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _ended(self, timeout: float | None) -> bool:
        if self._pidfd is None:
            return True
        readable, _, _ = select.select([self._pidfd], [], [], timeout)
        if not readable:
            return False
        os.close(self._pidfd)
        self._pidfd = None
        self.returncode = self._exit_status()
        return True

    def _exit_status(self) -> int:
        return -signal.SIGKILL  # unknown here; TVM's pool only asks whether it ended

    def __del__(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)


class ForkedChild(ForkedProcess):
    """A process this one forked: watched as a ForkedProcess, and reaped here, where its exit
    status is known."""

    def _exit_status(self) -> int:
        try:
            _pid, status = os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped elsewhere
            return -signal.SIGKILL
        return os.waitstatus_to_exitcode(status)


class ForkedGroupLeader(ForkedProcess):
    """A forked process that writes its exit code to ``status_fd`` as it ends (write_exit_code):
    the code it wrote, or -SIGKILL when it wrote none (SIGKILL is the one way it ends without)."""

    def __init__(self, pid: int, status_fd: int):
        self._status_fd: int | None = status_fd
        super().__init__(pid)

    def _exit_status(self) -> int:
        fd, self._status_fd = self._status_fd, None
        if fd is None:
            return -signal.SIGKILL
        try:
            os.set_blocking(fd, False)
            written = os.read(fd, _EXIT_CODE.size)
        except OSError:  # BlockingIOError: a process of its group still holds the write end
            written = b""  # as when it ended without a word (killed)
        finally:
            os.close(fd)
        return _EXIT_CODE.unpack(written)[0] if len(written) == _EXIT_CODE.size else -signal.SIGKILL

    def __del__(self) -> None:
        if self._status_fd is not None:
            os.close(self._status_fd)
        super().__del__()


def write_exit_code(status_fd: int, code: int) -> None:
    """In a ForkedGroupLeader: tell whoever watches it how it ended."""
    try:
        os.write(status_fd, _EXIT_CODE.pack(code))
    except OSError:
        pass
