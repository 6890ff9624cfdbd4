"""A background submit (`farm.submit(..., wait=False)`) leaves its caller's stderr alone: what the caller
writes there while the job tunes, through sys.stderr or straight to file descriptor 2, reaches the caller's
stderr, not the job's log; the job's log still has the tune's lines.

A real script in a process of its own, its stderr a pipe."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from support.farm_process import farm_env

pytestmark = pytest.mark.slow

CALLER = textwrap.dedent("""
    import os, sys
    import farm

    handle = farm.submit("mlp-tiny", "llvm", 1, trials_per_task=32, runs=2, registry=sys.argv[1], wait=False)
    for event in handle.events():
        if event.kind == "measured":  # tuning
            print("marker-from-sys.stderr", file=sys.stderr, flush=True)
            os.write(2, b"marker-from-fd-2\\n")
            print("tuning" if not handle.done else "ended", flush=True)
            break
    job = handle.wait(timeout=600)
    print(job.id, job.state, flush=True)
""")
MARKERS = ("marker-from-sys.stderr", "marker-from-fd-2")


def test_a_background_submit_leaves_the_callers_stderr_alone(tmp_path):
    home = tmp_path / "home"
    done = subprocess.run([sys.executable, "-c", CALLER, f"sqlite:///{tmp_path / 'registry.db'}"],
                          env=farm_env(home), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[0] == "tuning", done.stdout  # the markers were written while the job tuned
    job_id, state = lines[-2:]
    assert state == "succeeded", done.stdout
    for marker in MARKERS:
        assert marker in done.stderr, (marker, done.stderr[-2000:])

    logs = home / "jobs" / job_id / "logs"
    written = {path.name: path.read_text(errors="replace") for path in logs.iterdir() if path.is_file()}
    for name, text in written.items():
        for marker in MARKERS:
            assert marker not in text, (marker, name)
    # MetaSchedule's own log of the tune (its task scheduler's, a file per task) is the job's still.
    assert any("task_scheduler" in name and text.strip() for name, text in written.items()), sorted(written)
