"""The TVM RPC tracker: run one, read its summary, and get sessions from it, all with deadlines."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.errors import FarmError, Unreachable
from foundation.processes.process_group import ProcessGroup
from foundation.rpc.protocol import RPC_TRACKER_MAGIC, TrackerCode

if TYPE_CHECKING:
    from tvm.rpc.client import RPCSession

logger = logging.getLogger("farm.coordinator.tracker")

# TVM's tracker keeps everything in memory and its clients block without deadlines; every
# call here talks its protocol (magic handshake, then [int32 size][json] frames; the constants
# are foundation.rpc.protocol's, TVM's own without importing TVM) over a socket whose timeout
# is re-armed from one deadline, so none blocks past it.


class TrackerUnreachable(Unreachable):
    """The RPC tracker refused the connection, broke the protocol, or did not answer in time."""


class NoServerAvailable(Unreachable):
    """No RPC server of the requested key could be had from the tracker before the deadline."""


@dataclass(frozen=True)
class RegisteredServer:
    """An RPC server the tracker lists (free or busy), at the address the tracker saw."""

    key: str
    host: str
    port: int


@dataclass(frozen=True)
class KeyQueue:
    """The tracker's view of one key: servers listed, servers free, requests waiting."""

    key: str
    servers: int
    free: int
    pending: int

    @property
    def busy(self) -> int:
        """Listed servers not free: in a session, or handed to a client that has not connected."""
        return max(0, self.servers - self.free)


@dataclass(frozen=True)
class TrackerSummary:
    """One SUMMARY answer of the tracker."""

    servers: tuple[RegisteredServer, ...]
    queues: dict[str, KeyQueue]
    # The address of this box as the tracker sees it (our end of the summary connection):
    # what it records as the host of a server on this box that registered without custom_addr.
    client_host: str

    def queue(self, key: str) -> KeyQueue:
        return self.queues.get(key, KeyQueue(key, servers=0, free=0, pending=0))

    def servers_of(self, key: str) -> list[RegisteredServer]:
        return [s for s in self.servers if s.key == key]


def parse_tracker_address(address: str) -> tuple[str, int]:
    """'host:port' (as `--tracker` takes it) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise FarmError(f"tracker address {address!r} is not host:port", "write it like 127.0.0.1:9190")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------- the protocol


class _Deadline:
    def __init__(self, seconds: float):
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        return self._end - time.monotonic()

    def remaining(self) -> float:
        """Seconds left, for a socket timeout; socket.timeout once none are."""
        left = self.left()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left


def _recv_exact(sock: socket.socket, nbytes: int, deadline: _Deadline) -> bytes:
    chunks, got = [], 0
    while got < nbytes:
        sock.settimeout(deadline.remaining())
        chunk = sock.recv(nbytes - got)
        if not chunk:
            raise ConnectionResetError("the tracker closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _send_json(sock: socket.socket, value, deadline: _Deadline) -> None:
    data = json.dumps(value).encode("utf-8")
    sock.settimeout(deadline.remaining())
    sock.sendall(struct.pack("<i", len(data)) + data)


def _recv_json(sock: socket.socket, deadline: _Deadline):
    (size,) = struct.unpack("<i", _recv_exact(sock, 4, deadline))
    return json.loads(_recv_exact(sock, size, deadline).decode("utf-8"))


def _open(host: str, port: int, deadline: _Deadline) -> socket.socket:
    """A socket past the tracker's magic handshake."""
    sock = socket.create_connection((host, port), timeout=deadline.remaining())
    try:
        sock.settimeout(deadline.remaining())
        sock.sendall(struct.pack("<i", RPC_TRACKER_MAGIC))
        (magic,) = struct.unpack("<i", _recv_exact(sock, 4, deadline))
        if magic != RPC_TRACKER_MAGIC:
            raise ConnectionError(f"{host}:{port} answered, but not as a TVM RPC tracker")
        return sock
    except BaseException:
        sock.close()
        raise


def _unreachable(host: str, port: int, timeout: float, err: BaseException) -> TrackerUnreachable:
    reason = "no answer in time" if isinstance(err, socket.timeout) else str(err) or type(err).__name__
    return TrackerUnreachable(
        f"the TVM RPC tracker at {host}:{port} did not answer within {timeout:g} s ({reason})",
        f"start one (python -m tvm.exec.rpc_tracker --host {host} --port {port}) "
        "or configure the address of a running tracker",
    )


def tracker_summary(host: str, port: int, timeout: float = 5.0) -> TrackerSummary:
    """Ask the tracker for its servers and queues; raises TrackerUnreachable after ``timeout``."""
    deadline = _Deadline(timeout)
    try:
        with _open(host, port, deadline) as sock:
            client_host = sock.getsockname()[0]
            _send_json(sock, [TrackerCode.SUMMARY], deadline)
            reply = _recv_json(sock, deadline)
    except (OSError, ValueError) as err:  # socket.timeout is an OSError; ValueError: bad JSON
        raise _unreachable(host, port, timeout, err) from None
    if not isinstance(reply, list) or len(reply) != 2 or reply[0] != TrackerCode.SUCCESS:
        raise _unreachable(host, port, timeout, ConnectionError(f"unexpected SUMMARY reply {reply!r:.200}"))
    return _summary_from_json(reply[1], client_host)


def _summary_from_json(status: dict, client_host: str) -> TrackerSummary:
    servers = []
    for info in status.get("server_info", []):
        # The tracker labels a server connection "server:<key>" (clients have no label).
        key = info.get("key", "").partition(":")[2]
        host, port = info["addr"]
        servers.append(RegisteredServer(key=key, host=str(host), port=int(port)))
    queues = {}
    keys = set(status.get("queue_info", {})) | {s.key for s in servers}
    for key in sorted(keys):
        q = status.get("queue_info", {}).get(key, {})
        queues[key] = KeyQueue(key=key, servers=sum(s.key == key for s in servers),
                               free=int(q.get("free", 0)), pending=int(q.get("pending", 0)))
    return TrackerSummary(servers=tuple(servers), queues=queues, client_host=client_host)


# --------------------------------------------------------------------------- sessions


def request_session(host: str, port: int, key: str, timeout: float, *,
                    session_timeout: float = 0.0, priority: int = 1) -> "RPCSession":
    """An RPC session on a server of ``key``; NoServerAvailable when ``timeout`` passes first.

    Like TVM's TrackerSession.request, which waits forever while no server of the key is
    free. ``session_timeout`` (s, 0 = none) is passed on: the server ends longer sessions.
    Raises TrackerUnreachable when the tracker refuses or does not complete its handshake.
    """
    overall = _Deadline(timeout)
    # The last part of the budget is kept for asking the tracker how many servers the key has,
    # so that the error can say so and still arrive by the deadline.
    waiting = _Deadline(timeout - min(1.0, 0.2 * timeout))
    last_error: str | None = None  # why the previous server handed out could not be used
    while True:
        try:
            sock = _open(host, port, waiting)
        except TimeoutError as err:
            if last_error is not None and waiting.left() <= 0:
                raise _no_server(host, port, key, timeout, last_error, overall) from None
            raise _unreachable(host, port, timeout, err) from None
        except (OSError, ValueError) as err:
            raise _unreachable(host, port, timeout, err) from None
        with sock:
            try:
                _send_json(sock, [TrackerCode.REQUEST, key, "", priority], waiting)
                reply = _recv_json(sock, waiting)
            except TimeoutError:
                # Closing the socket withdraws the request: when a server frees up, the tracker
                # skips requests whose connection is closed.
                raise _no_server(host, port, key, timeout, last_error, overall) from None
            except (OSError, ValueError) as err:
                raise _unreachable(host, port, timeout, err) from None
        if not isinstance(reply, list) or reply[0] != TrackerCode.SUCCESS:
            raise _unreachable(host, port, timeout, ConnectionError(f"unexpected REQUEST reply {reply!r:.200}"))
        server_host, server_port, matchkey = reply[1]
        try:
            return _connect(server_host, server_port, matchkey, session_timeout, waiting)
        except TimeoutError:
            last_error = f"the server it gave out, {server_host}:{server_port}, did not answer"
            raise _no_server(host, port, key, timeout, last_error, overall) from None
        except Exception as err:
            last_error = f"{server_host}:{server_port} refused the session: {err}"
            logger.info("RPC server %s:%s of key %s refused the session (%s); asking the tracker again",
                        server_host, server_port, key, err)


def _connect(host: str, port: int, matchkey: str, session_timeout: float, deadline: _Deadline) -> "RPCSession":
    """tvm.rpc.connect with a deadline.

    Its handshake is a blocking C++ read with no timeout: a server whose listen thread died
    still accepts into the kernel backlog and never answers. The call releases the GIL, so it
    runs in a daemon thread that we stop waiting for; it ends when the server's socket closes
    (e.g. when its supervisor restarts it), and a late session is closed when dropped.
    """
    from tvm import rpc

    outcome: dict = {}

    def connect() -> None:
        try:
            outcome["session"] = rpc.connect(host, port, matchkey, session_timeout)
        except BaseException as err:
            outcome["error"] = err

    thread = threading.Thread(target=connect, name=f"rpc-connect-{host}:{port}", daemon=True)
    thread.start()
    thread.join(deadline.remaining())
    if thread.is_alive():
        raise TimeoutError("RPC handshake timed out")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["session"]


def _no_server(host: str, port: int, key: str, timeout: float, last_error: str | None,
               overall: _Deadline) -> FarmError:
    last_error = last_error or "none became free"
    try:
        summary = tracker_summary(host, port, timeout=max(0.05, overall.left()))
    except TrackerUnreachable as err:
        return NoServerAvailable(
            f"no RPC server with key {key!r} could be had within {timeout:g} s ({last_error}), "
            f"and the tracker at {host}:{port} then stopped answering ({err.problem})",
            "check that the tracker is running")
    queue = summary.queue(key)
    problem = (f"no RPC server with key {key!r} could be had within {timeout:g} s: the tracker at "
               f"{host}:{port} lists {queue.servers} server(s) for it ({queue.free} free, "
               f"{queue.busy} busy, {queue.pending} request(s) queued, this one included; {last_error})")
    if queue.servers == 0:
        known = ", ".join(sorted(k for k, q in summary.queues.items() if q.servers)) or "none"
        fix = (f"start an agent whose RPC server registers under {key!r}, or check the key "
               f"(keys with servers: {known})")
    else:
        fix = "wait for the busy servers, add servers of this key, or allow a longer timeout"
    return NoServerAvailable(problem, fix)


# --------------------------------------------------------------------------- the process


def _free_port(host: str) -> int:
    """A port free on ``host``; FarmError when ``host`` is no address of this box."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as sock:
            sock.bind(address)
            return sock.getsockname()[1]
    except OSError as err:  # socket.gaierror too: a name that resolves to nothing
        raise FarmError(f"the RPC tracker cannot listen on {host}: {err.strerror or err}",
                        "give --tracker-listen an address of this host (0.0.0.0 for all, 127.0.0.1 for "
                        "loopback)") from None


def _answers(host: str, port: int) -> bool:
    try:
        tracker_summary(host, port, timeout=1.0)
        return True
    except TrackerUnreachable:
        return False


def _error_line(output: str) -> str:
    """The exception a failed TVM CLI died of, e.g. 'ValueError: cannot bind to any port ...'."""
    # TVM's Tracker.__del__ then fails too ("Exception ignored in ..."): not the cause.
    output = output.split("Exception ignored in")[0]
    errors = [line.strip() for line in output.splitlines()
              if re.match(r"\s*[\w.]*(Error|Exception): ", line) and not line.rstrip().endswith("last):")]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return errors[-1] if errors else (lines[-1] if lines else "no output")


class TrackerProcess:
    """A TVM RPC tracker run as a subprocess (foundation.rpc.single_process: TVM's tracker, one process).

    ``port=0`` picks a free port. The tracker itself would move on to the next free port up to
    its --port-end (default 9199) when the one asked for is taken, so we pass port+1: it binds
    exactly the port we report, or fails.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, start_timeout: float = 30.0,
                 stop_grace: float = 5.0):
        self.host = host
        self.port = port
        self._start_timeout = start_timeout
        self._stop_grace = stop_grace
        self._group: ProcessGroup | None = None

    @property
    def address(self) -> str:
        """host:port, the form `--tracker` and the farm's configuration take."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._group is None else self._group.pid

    @property
    def running(self) -> bool:
        return self._group is not None and self._group.exit_code is None

    def start(self) -> "TrackerProcess":
        """Start the tracker; it is running, and is the process listening on its port, on return.

        A port that something else holds fails the start: answering on the port is not
        enough, since another farm's tracker there answers too.
        """
        if self.running:
            return self
        _free_port(self.host)  # a host that is not this box's is refused here, before a process starts
        pick_port = self.port == 0
        for _attempt in range(3 if pick_port else 1):
            port = _free_port(self.host) if pick_port else self.port
            group = ProcessGroup(
                [sys.executable, "-m", "foundation.rpc.single_process", "tracker", "--host", self.host,
                 "--port", str(port), "--port-end", str(port + 1)],
                output_logger=logging.getLogger("farm.coordinator.tracker.output"),
                # The tracker is Python and sockets: TVM's runtime library is all its import needs to
                # load, not the 260 MB compiler (0.7 CPU-s to start on a Zen 3 instead of 1.25).
                env=dict(os.environ, TVM_USE_RUNTIME_LIB="1"))
            self._group = group.start()
            try:
                if self._wait_until_listening(port):
                    self.port = port
                    logger.info("RPC tracker listening on %s:%d (pid %d)", self.host, port, group.pid)
                    return self
            except BaseException:
                self.stop()
                raise
            tail = group.output_tail()
            self._group.stop(self._stop_grace)
            self._group = None
            if not pick_port or "cannot bind" not in tail:
                break
            # Another process took the port between our probe and the tracker's bind.
            logger.info("port %d was taken before the tracker bound it; trying another", port)
        taken = "cannot bind" in tail or _answers(self.host, port)
        raise FarmError(
            f"the RPC tracker did not start on {self.host}:{port} "
            + (f"(the port is taken by another process: {_error_line(tail)})" if taken else f"({_error_line(tail)})"),
            "free the port or choose another --tracker-listen; to use a tracker that runs already, give it as --tracker"
            if not pick_port else "see its output (logger farm.coordinator.tracker.output)")

    def _wait_until_listening(self, port: int) -> bool:
        """True once our tracker listens on ``port`` and answers a SUMMARY; False if it exited first."""
        end = time.monotonic() + self._start_timeout
        while time.monotonic() < end:
            if self._group.exit_code is not None:
                return False
            if self._listens(port):
                try:
                    tracker_summary(self.host, port, timeout=1.0)
                    return True
                except TrackerUnreachable:
                    pass
            time.sleep(0.1)
        self.stop()
        raise TrackerUnreachable(
            f"the RPC tracker started on {self.host}:{port} did not answer within {self._start_timeout:g} s",
            "check the machine's load and the tracker's output (logger farm.coordinator.tracker.output)")

    def _listens(self, port: int) -> bool:
        """Whether a process of our tracker's group holds the listening socket of ``port``."""
        import psutil

        try:
            members = [psutil.Process(self._group.pid), *self._group.descendants()]
        except psutil.Error:
            return False
        for member in members:
            try:
                connections = member.net_connections(kind="tcp")
            except psutil.Error:
                continue
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in connections):
                return True
        return False

    def stop(self) -> None:
        """Stop the tracker and every process it started (TERM, then KILL after a grace)."""
        if self._group is not None:
            self._group.stop(self._stop_grace)
            logger.info("RPC tracker on %s:%d stopped", self.host, self.port)
            self._group = None

    def restart(self) -> "TrackerProcess":
        """Stop and start again on the same port. The new tracker knows no servers or queues."""
        self.stop()
        return self.start()

    def __enter__(self) -> "TrackerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
