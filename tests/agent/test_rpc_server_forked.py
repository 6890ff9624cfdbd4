"""The agent's RPC server forked from its workers' zygote (Zygote.start_group as ProcessGroup's
launcher): real zygote, tracker, server and sessions on loopback."""

from __future__ import annotations

import logging
import os
import signal
import sys

import psutil
import pytest

from agent.rpc_server import SupervisedRPCServer
from foundation.meta_schedule.forked_workers import Zygote, forking_available
from foundation.processes.process_group import ProcessGroup
from foundation.rpc.tracker import TrackerProcess, request_session

from support.polling import process_gone, wait_for

KEY = "cpu-forked"
HOST = "127.0.0.1"

pytestmark = pytest.mark.skipif(not forking_available(), reason="forked workers need Linux pidfds (5.3+)")


@pytest.fixture
def zygote(leaves_no_process):
    zygote = Zygote("llvm")  # this test's own: the worker's would be shared with its in-process tuning
    yield zygote
    zygote.close()


def _adds_one(tracker: TrackerProcess) -> int:
    session = request_session(HOST, tracker.port, KEY, timeout=10)
    try:
        return session.get_function("rpc.test.addone")(41)  # runs in the server's session child
    finally:
        del session


def _forked_server(tracker: TrackerProcess, zygote: Zygote, **timing) -> SupervisedRPCServer:
    return SupervisedRPCServer(HOST, tracker.port, KEY, host=HOST, port=0, launcher=zygote.start_group,
                               **{"check_interval": 1.0, "restart_grace": 4.0, "start_timeout": 20.0, **timing})


@pytest.mark.slow
def test_a_server_forked_from_the_zygote_serves_logs_and_is_restarted_with_its_exit_code(tracker, zygote):
    with _forked_server(tracker, zygote) as server:
        server.wait_until_serving(timeout=30)
        # The group's guard is the zygote's child, leads a group of its own, and the server under it
        # is a fork too (the zygote's command line), not a new Python importing TVM.
        guard = psutil.Process(server._group.pid)
        assert guard.ppid() == zygote.process.pid
        assert os.getpgid(server.pid) == guard.pid == os.getpgid(guard.pid) != os.getpgid(0)
        assert psutil.Process(server.pid).cmdline() == psutil.Process(zygote.process.pid).cmdline()
        assert _adds_one(tracker) == 42
        # TVM's log lines reach the agent's logger, as a new Python's did.
        assert f"bind to {HOST}:{server.port}" in server._group.output_tail()

        killed = server.pid
        os.kill(killed, signal.SIGKILL)
        wait_for(lambda: server.restarts >= 1, 30, "the watchdog's restart")
        assert server.last_restart_reason == "the RPC server process exited with code -9"
        server.wait_until_serving(timeout=30)
        assert server.pid != killed and _adds_one(tracker) == 42
    # leaves_no_process: the guard, the server and its sessions are gone.


@pytest.mark.slow
def test_the_zygotes_end_takes_the_servers_group_and_its_session_down(tracker, zygote):
    # No check, no restart during the test: what is asserted is the guard's, not the watchdog's.
    with _forked_server(tracker, zygote, check_interval=120.0) as server:
        server.wait_until_serving(timeout=30)
        session = request_session(HOST, tracker.port, KEY, timeout=10)
        assert session.get_function("rpc.test.addone")(1) == 2
        group = [server._group.pid, server.pid, *(c.pid for c in psutil.Process(server.pid).children())]
        assert len(group) == 3  # guard, server, the session's child
        zygote.process.kill()  # SIGKILL: nothing of the zygote's own runs
        for pid in group:
            assert process_gone(pid, within=10), f"{pid} outlived the zygote"
        del session


def test_a_launcher_that_cannot_start_the_command_leaves_it_a_new_guarded_python(leaves_no_process):
    def cannot(argv, output, env):
        raise ChildProcessError("no zygote here")

    group = ProcessGroup([sys.executable, "-c", "print('started', flush=True); import time; time.sleep(60)"],
                         logging.getLogger("test"), launcher=cannot).start()
    try:
        wait_for(lambda: "started" in group.output_tail(), 30, "the command's output")
        assert "foundation.processes.group_guard" in psutil.Process(group.pid).cmdline()
        assert psutil.Process(group.command_pid).cmdline()[1] == "-c"
    finally:
        group.stop(grace=2.0)
    assert group.exit_code is not None


def test_a_zygote_runs_only_python_dash_m_commands(zygote):
    with pytest.raises(ValueError, match="python -m"):
        zygote.start_group([sys.executable, "-c", "pass"], 1, dict(os.environ))
    assert zygote.process is None  # refused before the zygote was started
