"""The processes a test starts take Ctrl-C as a terminal's foreground job does, however the run
itself was started (tests/conftest.py): a run started in the background by a shell without job
control inherits SIGINT and SIGQUIT ignored."""

from __future__ import annotations

import signal
import subprocess


def _ignored_signals(pid: int) -> set[int]:
    with open(f"/proc/{pid}/status") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn:"))
    return {signum for signum in range(1, 65) if mask & (1 << (signum - 1))}


def test_a_process_a_test_starts_does_not_ignore_ctrl_c():
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        ignored = _ignored_signals(child.pid)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert not ignored & {signal.SIGINT, signal.SIGQUIT}, sorted(ignored)


def test_ctrl_c_ends_a_process_a_test_starts():
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        child.send_signal(signal.SIGINT)
        code = child.wait(timeout=10)
    finally:
        child.kill()
    assert code == -signal.SIGINT
