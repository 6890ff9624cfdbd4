"""TVM RPC supervision with real processes on loopback: registration, killed sessions, tracker restarts."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from agent.rpc_server import Observation, RegistrationWatch, SupervisedRPCServer, answers_handshake
from foundation.errors import FarmError
from foundation.rpc.tracker import (
    NoServerAvailable,
    TrackerProcess,
    TrackerUnreachable,
    request_session,
    tracker_summary,
)

from support.polling import wait_for

KEY = "cpu-test"
HOST = "127.0.0.1"
TEST_TIMEOUT_S = 90  # per test; the tests' own waits are bounded well below this
RECOVERY_S = 60  # what the brief allows for the supervisor to bring a server back



# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def hard_timeout():
    """Fail a test that runs past TEST_TIMEOUT_S, and still run its teardown (which stops processes)."""
    def expired(signum, frame):
        raise TimeoutError(f"test exceeded its hard timeout of {TEST_TIMEOUT_S} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT_S)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def server(tracker):
    supervised = SupervisedRPCServer(HOST, tracker.port, KEY, host=HOST, port=0,
                                     check_interval=1.0, restart_grace=4.0, start_timeout=20.0)
    with supervised:
        supervised.wait_until_serving(timeout=30)
        yield supervised


def _wait_for(condition, timeout: float, what: str):
    return wait_for(condition, timeout, what, interval=0.2)


def _assert_session_works(tracker: TrackerProcess) -> None:
    sess = request_session(HOST, tracker.port, KEY, timeout=10)
    try:
        assert sess.get_function("rpc.test.addone")(41) == 42  # ran in the server's session child
        assert sess.cpu(0).exist
    finally:
        del sess


def _session_children(server: SupervisedRPCServer) -> list[psutil.Process]:
    # the server (foundation.rpc.single_process) -> one forked child per session
    return [p for p in psutil.Process(server.pid).children() if p.status() != psutil.STATUS_ZOMBIE]


# --------------------------------------------------------------------------- the tests


@pytest.mark.slow
def test_server_registers_and_serves_sessions(tracker, server):
    query = subprocess.run(
        [sys.executable, "-m", "tvm.exec.query_rpc_tracker", "--host", HOST, "--port", str(tracker.port)],
        capture_output=True, text=True, timeout=60, check=True)
    assert f"{HOST}:{server.port}" in query.stdout and f"server:{KEY}" in query.stdout, query.stdout
    queue_line = next(line for line in query.stdout.splitlines() if line.startswith(KEY))
    assert queue_line.split()[1:3] == ["1", "1"], query.stdout  # total 1, free 1

    summary = tracker_summary(HOST, tracker.port, timeout=5)
    assert summary.queue(KEY).servers == 1 and summary.queue(KEY).free == 1
    assert answers_handshake(HOST, server.port, timeout=3)
    _assert_session_works(tracker)
    assert server.restarts == 0 and server.serving


def test_the_tracker_loads_tvms_runtime_library_not_its_compiler(tracker):
    # TrackerProcess starts it with TVM_USE_RUNTIME_LIB=1: the tracker is Python and sockets.
    (command,) = psutil.Process(tracker.pid).children()  # under its group's guard
    maps = Path(f"/proc/{command.pid}/maps").read_text()
    assert "libtvm_runtime.so" in maps and "libtvm_compiler.so" not in maps
    assert tracker_summary(HOST, tracker.port, timeout=5).servers == ()


@pytest.mark.slow
def test_killed_session_child_is_restarted(tracker, server):
    sess = request_session(HOST, tracker.port, KEY, timeout=10)
    assert sess.get_function("rpc.test.addone")(1) == 2
    children = _wait_for(lambda: _session_children(server), 10, "a session child process")
    restarts_before, pid_before = server.restarts, server.pid
    time.sleep(3 * server.check_interval)  # a server in a session is busy (not free), not dead
    assert server.serving and server.restarts == restarts_before

    children[0].kill()  # what a segfault in measured code does
    del sess

    _wait_for(lambda: server.restarts > restarts_before, RECOVERY_S, "a restart")
    assert server.pid != pid_before
    # TVM's listen loop dies with the session's child, and the server process ends with it.
    assert "exited with code 1" in server.last_restart_reason
    server.wait_until_serving(timeout=RECOVERY_S)
    _assert_session_works(tracker)


@pytest.mark.slow
def test_server_is_listed_again_after_tracker_restart(tracker, server):
    old_tracker = tracker.pid
    tracker.stop()
    time.sleep(3)
    with pytest.raises(TrackerUnreachable):
        tracker_summary(HOST, tracker.port, timeout=1)
    # Same port, a new process: it keeps nothing, so whatever it lists registered with it anew.
    # (Asking it at once whether it lists nothing raced TVM's own reconnect, which can win.)
    tracker.start()
    assert tracker.pid != old_tracker

    server.wait_until_serving(timeout=RECOVERY_S)
    _assert_session_works(tracker)
    _wait_for(lambda: server.serving, 10, "the watchdog seeing the server listed")


@pytest.mark.slow
def test_server_the_new_tracker_does_not_list_is_restarted(tracker, server):
    # TVM's server stops reconnecting after ~60 s without a tracker; a frozen listen loop
    # stands in for that here, without the minute of waiting (the loop is a thread of the server's process).
    listen_loop = psutil.Process(server.pid)
    restarts_before = server.restarts
    tracker.stop()
    listen_loop.suspend()
    time.sleep(3)
    tracker.start()

    _wait_for(lambda: server.restarts > restarts_before, RECOVERY_S, "a restart")
    assert "tracker was unreachable" in server.last_restart_reason
    assert not listen_loop.is_running() or listen_loop.status() == psutil.STATUS_ZOMBIE
    server.wait_until_serving(timeout=RECOVERY_S)
    _assert_session_works(tracker)


@pytest.mark.slow
def test_a_stop_ends_the_wait_for_a_tracker_that_is_gone(tracker, server):
    # An agent stopped together with its coordinator (and so its tracker) while waiting for its
    # server to be listed: the wait ends with the stop, not with its timeout.
    tracker.stop()
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    start = time.monotonic()
    server.wait_until_serving(timeout=RECOVERY_S, stop=stop)  # no FarmError: it stopped, it did not time out
    assert stop.is_set() and time.monotonic() - start < RECOVERY_S / 2
    with pytest.raises(FarmError, match="was not listed by the tracker"):
        server.wait_until_serving(timeout=1)


@pytest.mark.slow
def test_waits_end_at_their_deadline(tracker):
    start = time.monotonic()
    with pytest.raises(NoServerAvailable) as caught:
        request_session(HOST, tracker.port, "no-such-key", timeout=2)
    assert time.monotonic() - start < 2.5
    assert "'no-such-key'" in str(caught.value) and "lists 0 server(s)" in str(caught.value)
    assert isinstance(caught.value, FarmError) and caught.value.fix

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind((HOST, 0))
        closed_port = probe.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(TrackerUnreachable) as caught:
        tracker_summary(HOST, closed_port, timeout=2)
    assert time.monotonic() - start < 2.5
    assert f"{HOST}:{closed_port}" in str(caught.value)

    # A peer that accepts (the kernel's backlog) but never answers must not hang us either.
    with socket.socket() as silent:
        silent.bind((HOST, 0))
        silent.listen(4)
        silent_port = silent.getsockname()[1]
        for call in (lambda: tracker_summary(HOST, silent_port, timeout=1),
                     lambda: request_session(HOST, silent_port, KEY, timeout=1)):
            start = time.monotonic()
            with pytest.raises(TrackerUnreachable):
                call()
            assert time.monotonic() - start < 1.5
        assert not answers_handshake(HOST, silent_port, timeout=0.5)


# --------------------------------------------------------------------------- the restart policy
# Pure: the cases that take TVM minutes to produce (tracker away > 60 s) in no time.


def _watch(grace=10.0, start_timeout=30.0) -> RegistrationWatch:
    return RegistrationWatch(grace, now=0.0, start_timeout=start_timeout)


LISTED = Observation(exit_code=None, tracker_reachable=True, listed=True)
UNLISTED = Observation(exit_code=None, tracker_reachable=True, listed=False)
TRACKER_AWAY = Observation(exit_code=None, tracker_reachable=False)


def test_policy_gives_a_new_server_start_timeout_to_register():
    watch = _watch()
    assert watch.observe(UNLISTED, 29.0) is None
    assert "never registered" in watch.observe(UNLISTED, 30.0)


def test_policy_restarts_an_exited_process_at_once():
    watch = _watch()
    assert "exited with code -9" in watch.observe(Observation(exit_code=-9, tracker_reachable=True), 1.0)


def test_policy_restarts_a_server_that_vanished_from_the_list():
    watch = _watch()
    assert watch.observe(LISTED, 5.0) is None and watch.serving
    assert watch.observe(UNLISTED, 6.0) is None and not watch.serving
    assert watch.observe(UNLISTED, 15.0) is None
    assert "listen thread" in watch.observe(UNLISTED, 16.0)


def test_policy_keeps_the_server_while_the_tracker_is_away_and_restarts_if_forgotten():
    watch = _watch()
    watch.observe(LISTED, 5.0)
    for now in range(6, 300, 5):  # > 60 s: TVM's server has given up reconnecting
        assert watch.observe(TRACKER_AWAY, float(now)) is None
    assert watch.observe(UNLISTED, 300.0) is None  # it may still reconnect within TVM's 5 s retry
    reason = watch.observe(UNLISTED, 310.0)
    assert reason is not None and "tracker was unreachable" in reason


def test_policy_leaves_a_server_that_reconnects_after_a_short_outage():
    watch = _watch()
    watch.observe(LISTED, 5.0)
    watch.observe(TRACKER_AWAY, 10.0)
    assert watch.observe(UNLISTED, 15.0) is None
    assert watch.observe(LISTED, 20.0) is None and watch.serving
    assert watch.observe(UNLISTED, 25.0) is None
    assert watch.observe(UNLISTED, 34.0) is None  # unlisted for 9 s, not since 15.0


def test_policy_tells_busy_from_dead():
    watch = _watch()
    busy = Observation(exit_code=None, tracker_reachable=True, listed=True, in_session=True)
    for now in range(1, 600, 5):
        assert watch.observe(busy, float(now)) is None and watch.serving
    dead = Observation(exit_code=None, tracker_reachable=True, listed=True, unresponsive=True)
    assert watch.observe(dead, 600.0) is None and not watch.serving
    assert "listen loop is gone" in watch.observe(dead, 610.0)
    watch.restarted(611.0)
    assert watch.observe(UNLISTED, 640.0) is None  # a fresh start gets start_timeout again
