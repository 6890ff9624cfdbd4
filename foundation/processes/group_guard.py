"""Run a command inside this process group, and take the whole group down when our parent dies.

TVM's tracker and RPC server fork trees of processes in their own group. If the farm process
that started them is SIGKILLed it cannot stop them, and an orphaned RPC server would stay
registered with the tracker. This guard leads the group: the kernel signals it when its
parent dies (PR_SET_PDEATHSIG), and it then kills every process of the group.

    python -m foundation.processes.group_guard PARENT_PID -- COMMAND ...
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def _take_group_down(*_args) -> None:
    os.killpg(0, signal.SIGKILL)  # this process included


def main() -> int:
    parent = int(sys.argv[1])
    command = sys.argv[sys.argv.index("--") + 1:]
    signal.signal(signal.SIGTERM, _take_group_down)
    signal.signal(signal.SIGINT, _take_group_down)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the group is still stopped by ProcessGroup.stop
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        return 1
    child = subprocess.Popen(command)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
