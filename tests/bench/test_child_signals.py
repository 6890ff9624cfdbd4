"""bench/_child_signals.py: a bench script stopped by a signal stops the commands it runs, real
processes and real signals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from support.polling import process_gone, wait_for

BENCH = Path(__file__).resolve().parents[2] / "bench"

# A bench script in miniature: it waits in subprocess.run on one child, as the scripts wait on `farm submit`.
SCRIPT = """
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from _child_signals import pass_signals_to_children
pass_signals_to_children(grace_s=float(sys.argv[2]))
subprocess.run([sys.executable, "-c", sys.argv[3], sys.argv[4]], capture_output=True)
print("the child ended on its own", flush=True)
"""

# A farm command in miniature: the first SIGTERM is a cancel request, answered by ending 143.
CANCELLING_CHILD = """
import json, os, signal, sys, time
def cancel(signum, frame):
    open(sys.argv[1] + ".cancelled", "w").write(str(signum))
    sys.exit(143)
signal.signal(signal.SIGTERM, cancel)
json.dump({"child": os.getpid()}, open(sys.argv[1] + ".tmp", "w"))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""

# A command that ignores SIGTERM and has a child of its own (a builder worker).
STUBBORN_CHILD = """
import json, os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
json.dump({"child": os.getpid(), "worker": worker.pid}, open(sys.argv[1] + ".tmp", "w"))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def _start(tmp_path: Path, child: str, grace_s: float) -> tuple[subprocess.Popen, dict, Path]:
    ready = tmp_path / "ready.json"
    script = subprocess.Popen([sys.executable, "-c", SCRIPT, str(BENCH), str(grace_s), child, str(ready)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(ready.exists, timeout=30, what="the child's pid file")
    return script, json.loads(ready.read_text()), ready


def test_sigterm_reaches_the_command_which_ends_its_job_before_the_script_exits(tmp_path):
    script, pids, ready = _start(tmp_path, CANCELLING_CHILD, grace_s=60)
    script.send_signal(signal.SIGTERM)
    out, err = script.communicate(timeout=30)
    assert script.returncode == 128 + signal.SIGTERM
    assert Path(f"{ready}.cancelled").read_text() == str(int(signal.SIGTERM))  # the command's own handler ran
    assert "the child ended on its own" not in out  # the script went no further
    assert "SIGTERM: stopped" in err and "Traceback" not in err
    assert process_gone(pids["child"])


def test_a_command_that_ignores_it_is_killed_after_the_grace_with_its_own_children(tmp_path):
    script, pids, _ready = _start(tmp_path, STUBBORN_CHILD, grace_s=1)
    script.send_signal(signal.SIGTERM)
    script.communicate(timeout=30)  # well inside the default grace (60 s): the 1 s given here was kept
    assert script.returncode == 128 + signal.SIGTERM
    assert process_gone(pids["child"]) and process_gone(pids["worker"])


def test_a_hangup_is_passed_on_too(tmp_path):
    signum = signal.SIGHUP
    script, _pids, ready = _start(tmp_path, CANCELLING_CHILD.replace("SIGTERM", "SIGHUP"), grace_s=60)
    script.send_signal(signum)
    script.communicate(timeout=30)
    assert script.returncode == 128 + signum
    assert Path(f"{ready}.cancelled").read_text() == str(int(signum))

