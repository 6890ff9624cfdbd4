"""This box's TVM RPC server, restarted whenever the tracker stops listing it or it stops serving."""

from __future__ import annotations

import errno
import logging
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass

import psutil

from foundation.errors import FarmError
from foundation.processes.process_group import Launcher, ProcessGroup, is_live
from foundation.rpc.protocol import RPC_MAGIC
from foundation.rpc.tracker import TrackerSummary, TrackerUnreachable, tracker_summary

logger = logging.getLogger("farm.agent.rpc")

# Why a supervisor (each seen with TVM 0.27, see the notes' RPC section):
# - when a session's child process dies, TVM's listen thread dies with it, the tracker drops
#   the server from its list (the key's queue keeps `free: 0`), and the process lives on,
#   serving nothing;
# - when the tracker is away for more than ~60 s the server stops reconnecting, and a
#   restarted tracker has forgotten every server.
# In all of these the process is alive: only the tracker's list tells us it is useless.


@dataclass(frozen=True)
class Observation:
    """What one watchdog check saw."""

    exit_code: int | None  # None while the server process runs
    tracker_reachable: bool
    listed: bool = False  # the tracker lists this server under its key (free or busy)
    in_session: bool = False  # a session child process is alive
    # Listed, not in a session, its key has a server that is not free, and it did not answer
    # an RPC handshake: a listen loop that is gone while its tracker connection is not.
    unresponsive: bool = False


class RegistrationWatch:
    """Pure decision of when to restart the server, from a sequence of observations.

    Being unlisted only counts while the tracker answers, and only after a delay: a server
    that just started registers after ``start_timeout`` at most (an import of tvm, ~1.5 s on
    a 2-core box), and one whose tracker just came back reconnects within TVM's 5 s retry
    period, so ``grace`` should exceed that.
    """

    def __init__(self, grace: float, now: float, start_timeout: float = 30.0):
        self.grace = grace
        self.start_timeout = start_timeout
        self.serving = False
        self._registered = False  # listed at least once since the last (re)start
        self._unlisted_since: float | None = now
        self._unresponsive_since: float | None = None
        self._tracker_was_away = False

    def observe(self, obs: Observation, now: float) -> str | None:
        """The reason to restart the server now, or None to leave it alone."""
        if obs.exit_code is not None:
            self.serving = False
            return f"the RPC server process exited with code {obs.exit_code}"
        if not obs.tracker_reachable:
            # Keep the process: TVM reconnects by itself after short outages. Decide once the
            # tracker is back.
            self.serving = False
            self._tracker_was_away = True
            self._unlisted_since = None
            self._unresponsive_since = None
            return None
        if obs.listed:
            self._registered = True
            self._unlisted_since = None
            self._tracker_was_away = False
            if not obs.unresponsive:
                self._unresponsive_since = None
                self.serving = True
                return None
            self.serving = False
            if self._unresponsive_since is None:
                self._unresponsive_since = now
            if now - self._unresponsive_since >= self.grace:
                return (f"the tracker lists it, but it has had no session and has not answered an RPC "
                        f"handshake for {now - self._unresponsive_since:.0f} s (its listen loop is gone)")
            return None
        self.serving = False
        self._unresponsive_since = None
        if self._unlisted_since is None:
            self._unlisted_since = now
        if now - self._unlisted_since < (self.grace if self._registered else self.start_timeout):
            return None
        if self._tracker_was_away:
            why = ("after the tracker was unreachable: the tracker restarted and forgot it, "
                   "or the server gave up reconnecting")
        elif self._registered:
            why = "a session child that died takes TVM's listen thread with it"
        else:
            why = "it never registered since it started"
        return f"the tracker has not listed it for {now - self._unlisted_since:.0f} s ({why})"

    def registered(self, now: float) -> None:
        """The tracker was seen listing the server outside a watchdog check."""
        self._registered = True
        self._unlisted_since = None
        self._tracker_was_away = False
        self.serving = self._unresponsive_since is None

    def restarted(self, now: float) -> None:
        self.serving = False
        self._registered = False
        self._unlisted_since = now
        self._unresponsive_since = None
        self._tracker_was_away = False


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_rpc_address(host: str, port: int) -> None:
    """Refuse (exit 2) a ``host`` that is no address of this box, or a ``port`` another process
    holds, before the agent registers: the server's start raised it as a bug (exit 70)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TVM binds it
            sock.bind((host, port))
    except OSError as err:  # socket.gaierror too: a name that resolves to nothing
        if port and err.errno == errno.EADDRINUSE:
            raise FarmError(f"the TVM RPC server cannot listen on {host}:{port} (--rpc-port): the port is taken",
                            "stop what holds it, or give --rpc-port 0 for any free port") from None
        raise FarmError(f"the TVM RPC server cannot listen on {host} (--rpc-host): {err.strerror or err}",
                        "give --rpc-host an IPv4 address of this box (0.0.0.0 for all, 127.0.0.1 for loopback)"
                        ) from None


def _local_address(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0") else host


def answers_handshake(host: str, port: int, timeout: float) -> bool:
    """Whether an RPC server's listen loop answers a handshake within ``timeout``.

    We send a client key that matches nothing: a live loop replies RPC_CODE_MISMATCH at once
    (and logs a warning); a dead one leaves the connection in the kernel's backlog, unanswered.
    A server in a session does not accept either, so only ask one that has no session.
    """
    key = b"client:farm-liveness-probe"
    try:
        with socket.create_connection((_local_address(host), port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack("<ii", RPC_MAGIC, len(key)) + key)
            return len(sock.recv(4)) > 0
    except OSError:
        return False


class SupervisedRPCServer:
    """TVM's RPC server (foundation.rpc.single_process) registered under ``key``, kept registered by a watchdog.

    Every ``check_interval`` seconds the watchdog asks the tracker (with a deadline) whether it
    lists this server. The server is killed and started again when its process exits, when it
    has not registered ``start_timeout`` seconds after a (re)start, when the answering tracker
    has stopped listing it for ``restart_grace`` seconds, or when it is listed but dead (no
    session child, no answer to a handshake) for as long. While the tracker does not answer,
    the process is left alone.

    ``port=0`` picks a free port (kept across restarts while it stays free). ``custom_addr`` is
    the address the tracker gives clients, for servers bound to 0.0.0.0 behind another name.
    ``launcher`` starts each server process (ProcessGroup's: an agent's zygote forks it, sparing it
    the import of TVM); without one, or where it cannot, the server is a new Python.
    """

    def __init__(self, tracker_host: str, tracker_port: int, key: str, host: str = "127.0.0.1",
                 port: int = 0, *, custom_addr: str | None = None, check_interval: float = 5.0,
                 restart_grace: float = 15.0, start_timeout: float = 30.0, stop_grace: float = 5.0,
                 tracker_timeout: float | None = None, launcher: Launcher | None = None):
        if not key or any(c.isspace() for c in key):
            raise FarmError(f"RPC key {key!r} is empty or has spaces", "use a key like cpu-<fingerprint id>")
        self.tracker_host = tracker_host
        self.tracker_port = tracker_port
        self.key = key
        self.host = host
        self.port = port
        self.custom_addr = custom_addr
        self.check_interval = check_interval
        self.restart_grace = restart_grace
        self.start_timeout = start_timeout
        self._stop_grace = stop_grace
        self._tracker_timeout = tracker_timeout if tracker_timeout is not None else min(5.0, check_interval)
        self._pick_port = port == 0
        self._launcher = launcher
        self._group: ProcessGroup | None = None
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._watch = RegistrationWatch(restart_grace, time.monotonic(), start_timeout)
        self.restarts = 0
        self.last_restart_reason: str | None = None

    # ----------------------------------------------------------------------- public state

    @property
    def serving(self) -> bool:
        """The last check found the process alive, listed by the tracker, and not dead inside."""
        return self._watch.serving and self._group is not None and self._group.exit_code is None

    @property
    def pid(self) -> int | None:
        """The pid of the current RPC server process (it changes on restart)."""
        group = self._group
        return None if group is None else group.command_pid

    @property
    def tracker_address(self) -> str:
        return f"{self.tracker_host}:{self.tracker_port}"

    # ----------------------------------------------------------------------- lifecycle

    def start(self) -> "SupervisedRPCServer":
        with self._lock:
            if self._watchdog is not None:
                return self
            self._stopping.clear()
            self._launch()
            self._watch = RegistrationWatch(self.restart_grace, time.monotonic(), self.start_timeout)
            self._watchdog = threading.Thread(target=self._watch_loop, name=f"rpc-watchdog-{self.key}",
                                              daemon=True)
            self._watchdog.start()
        return self

    def stop(self) -> None:
        """Stop the watchdog, then the server and its session processes; idempotent."""
        self._stopping.set()
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and watchdog is not threading.current_thread():
            # A check or restart in progress is bounded by its deadlines.
            watchdog.join(self._tracker_timeout + 3 * self._stop_grace + 5.0)
        with self._lock:
            if self._group is not None:
                self._group.stop(self._stop_grace)
                logger.info("RPC server %s (key %s) stopped", self._where(), self.key)
                self._group = None
            self._watch.serving = False

    def wait_until_serving(self, timeout: float, stop: threading.Event | None = None) -> None:
        """Block until the tracker lists this server (then ``.serving`` is True); FarmError after
        ``timeout``. Returns early once ``stop`` is set: an agent told to stop while its tracker is
        gone must not wait out the timeout."""
        stop = stop or threading.Event()
        end = time.monotonic() + timeout
        last: str = "not listed yet"
        while time.monotonic() < end and not stop.is_set():
            if self._group is None:
                raise FarmError("the RPC server is not started", "call start() first")
            try:
                summary = tracker_summary(self.tracker_host, self.tracker_port,
                                          timeout=max(0.1, min(2.0, end - time.monotonic())))
                if self._listed(summary):
                    with self._lock:  # so that .serving is True from now on, not from the next check
                        self._watch.registered(time.monotonic())
                    return
            except TrackerUnreachable as err:
                last = err.problem
            stop.wait(0.2)
        if stop.is_set():
            return
        raise FarmError(
            f"the RPC server {self._where()} (key {self.key!r}) was not listed by the tracker at "
            f"{self.tracker_address} within {timeout:g} s ({last})",
            "check the tracker address and the server's output (logger farm.agent.rpc.output)")

    def __enter__(self) -> "SupervisedRPCServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ----------------------------------------------------------------------- the process

    def _argv(self) -> list[str]:
        argv = [sys.executable, "-m", "foundation.rpc.single_process", "server", "--host", self.host,
                # --port-end is exclusive; port+1 makes TVM bind exactly the port we watch for
                # in the tracker's list instead of silently moving to the next one.
                "--port", str(self.port), "--port-end", str(self.port + 1),
                "--tracker", self.tracker_address, "--key", self.key]
        if self.custom_addr:
            argv += ["--custom-addr", self.custom_addr]
        return argv

    def _launch(self) -> None:
        if self._pick_port and (self.port == 0 or not self._port_free()):
            self.port = _free_port(self.host)
        self._group = ProcessGroup(self._argv(), output_logger=logging.getLogger("farm.agent.rpc.output"),
                                   launcher=self._launcher).start()
        logger.info("RPC server started on %s (key %s, tracker %s, pid %d)",
                    self._where(), self.key, self.tracker_address, self._group.pid)

    def _port_free(self) -> bool:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TVM binds it
                sock.bind((self.host, self.port))
            return True
        except OSError:
            return False

    def _restart(self, reason: str) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            tail = self._group.output_tail() if self._group is not None else ""
            logger.warning("restarting RPC server %s (key %s): %s", self._where(), self.key, reason)
            if tail and "exited" in reason:
                logger.warning("its last output:\n%s", tail)
            if self._group is not None:
                self._group.stop(self._stop_grace)
            self._launch()
            self.restarts += 1
            self.last_restart_reason = reason
            self._watch.restarted(time.monotonic())

    def _where(self) -> str:
        return f"{self.custom_addr or self.host}:{self.port}"

    # ----------------------------------------------------------------------- the watchdog

    def _watch_loop(self) -> None:
        tracker_was_reachable = True
        while not self._stopping.wait(self.check_interval):
            try:
                obs = self._observe()
                if obs.tracker_reachable != tracker_was_reachable:
                    logger.log(logging.INFO if obs.tracker_reachable else logging.WARNING,
                               "tracker %s is %s", self.tracker_address,
                               "reachable again" if obs.tracker_reachable else "unreachable; keeping the server")
                    tracker_was_reachable = obs.tracker_reachable
                with self._lock:
                    reason = self._watch.observe(obs, time.monotonic())
                    if reason is not None:
                        self._restart(reason)
            except Exception:
                logger.exception("RPC server check failed; trying again in %g s", self.check_interval)

    def _observe(self) -> Observation:
        group = self._group
        if group is None:
            return Observation(exit_code=-1, tracker_reachable=False)
        exit_code = group.exit_code
        if exit_code is not None:
            return Observation(exit_code=exit_code, tracker_reachable=False)
        try:
            summary = tracker_summary(self.tracker_host, self.tracker_port, timeout=self._tracker_timeout)
        except TrackerUnreachable:
            return Observation(exit_code=None, tracker_reachable=False)
        if not self._listed(summary):
            return Observation(exit_code=None, tracker_reachable=True, listed=False)
        if self._in_session(group):
            return Observation(exit_code=None, tracker_reachable=True, listed=True, in_session=True)
        queue = summary.queue(self.key)
        if queue.free >= queue.servers:
            # Every listed server of the key is free, so ours is: its listen loop put it there.
            return Observation(exit_code=None, tracker_reachable=True, listed=True)
        # Some server of the key is not free and ours has no session: either a client holds
        # its match key and has not connected yet (TVM re-issues the key after ~6 s), or its
        # listen loop is gone. Only the loop answers a handshake.
        alive = answers_handshake(self.host, self.port, timeout=min(3.0, self.check_interval))
        unresponsive = not alive and not self._in_session(group)  # a client may have just connected
        return Observation(exit_code=None, tracker_reachable=True, listed=True, unresponsive=unresponsive)

    def _listed(self, summary: TrackerSummary) -> bool:
        # Without custom_addr the tracker records the address it saw the server connect from,
        # which is the address it sees for our summary connection too.
        host = self.custom_addr or summary.client_host
        return any(s.port == self.port and s.host == host for s in summary.servers_of(self.key))

    @staticmethod
    def _in_session(group: ProcessGroup) -> bool:
        """Whether a session child is alive: the server forks one child per session."""
        server_pid = group.command_pid
        if server_pid is None:
            return False
        try:
            return any(is_live(child) for child in psutil.Process(server_pid).children())
        except psutil.Error:
            return False
