"""A stopped benchmark stops what it started: SIGTERM or SIGHUP to a bench script is passed on to the
farm commands it runs, which cancel their jobs (farm/cli/interrupts.py), and the script exits once
they have; on SIGINT (Ctrl-C reaches them too) it waits for them the same way.

Without it, killing a script that waits in ``subprocess.run`` leaves its `farm submit` tuning on, an
orphan timing candidates beside whatever is measured next.
"""

from __future__ import annotations

import signal
import sys

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How long the children get to end their jobs before they (and theirs) are killed: a cancelled
# `farm submit` waits for the batch of candidates it is timing.
GRACE_S = 60.0


def pass_signals_to_children(grace_s: float = GRACE_S) -> None:
    """From now on, the first of SIGNALS reaches every child of this process (SIGINT from a terminal
    reaches them itself); once they have ended (or ``grace_s`` later, when they and their
    descendants are killed) this process exits 128 + the signal's number."""
    def forward(signum, _frame) -> None:
        import psutil

        for ignored in SIGNALS:  # a second signal while the children end changes nothing
            signal.signal(ignored, signal.SIG_IGN)
        me = psutil.Process()
        descendants = me.children(recursive=True)
        children = me.children()
        # Ctrl-C reaches the terminal's whole process group, the children with it; a second SIGINT
        # would stop a `farm submit` at once rather than after its batch.
        for child in children if signum != signal.SIGINT else ():
            try:
                child.send_signal(signum)
            except psutil.Error:
                continue
        _gone, alive = psutil.wait_procs(children, timeout=grace_s)
        for process in [*alive, *(d for d in descendants if d.is_running())]:
            try:
                process.kill()
            except psutil.Error:
                continue
        print(f"{signal.Signals(signum).name}: stopped, and the {len(children)} command(s) this benchmark "
              "ran with it", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum)

    for signum in SIGNALS:
        signal.signal(signum, forward)
