"""Ctrl-C in a command other than `farm submit` (which cancels its job: test_interrupts.py): one
line on stderr, with --json a document on stdout, exit 130, as for any other failure."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

from support.farm_process import FarmProcess, farm_env, json_document, one_error_line
from support.polling import wait_for


def test_ctrl_c_while_a_command_waits_on_its_coordinator_is_one_line_and_130(farm_exe, tmp_path):
    # A coordinator that accepts the connection and never answers: the command is inside its call.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        jobs = FarmProcess.start(farm_exe, tmp_path / "home", "jobs", "--coordinator", f"127.0.0.1:{port}", "--json")
        try:
            silent.settimeout(60)
            connection, _ = silent.accept()
            with connection:
                wait_for(lambda: jobs.proc.poll() is None, 5, "the command still waiting")
                jobs.interrupt_group()
                code, out, err = jobs.finish(timeout=60)
        finally:
            jobs.kill()
    assert code == 130, (code, err)
    assert one_error_line(err).startswith("error: interrupted"), err
    document = json_document(out)
    assert document["exit_code"] == 130 and document["error"] == "interrupted"


# Holds the import of typer (the first thing the command line imports) until the test's Ctrl-C.
SLOW_IMPORT = """
import os, pathlib, sys, time

class _HoldTyper:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            pathlib.Path(os.environ["FARM_TEST_IMPORTING"]).touch()
            time.sleep(60)
        return None

sys.meta_path.insert(0, _HoldTyper())
"""


def test_ctrl_c_while_the_command_line_imports_is_one_line_and_130(farm_exe, tmp_path):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SLOW_IMPORT)
    importing = tmp_path / "importing"
    env = {**farm_env(tmp_path / "home"), "PYTHONPATH": str(hooks), "FARM_TEST_IMPORTING": str(importing)}
    proc = subprocess.Popen([farm_exe, "models", "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        wait_for(importing.exists, 60, "the command line importing typer")
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert one_error_line(err) == "error: interrupted (nothing had started)"
    assert json_document(out) == {"error": "interrupted", "hint": "nothing had started", "exit_code": 130}
