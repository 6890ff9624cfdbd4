"""The coordinator's ingest process: reported records read and committed outside the serving process.

A child process of its own, with its own connection to the registry, takes the groups of
reports the report committer collects (coordinator.fleet.group_commit) as they come, reads
their records (a thread of its own) while the database commits the groups read before,
commits the groups read meanwhile in one transaction, and sends back one answer per group, in
order. The committer thread does not wait for the answers; a receiver thread hands them out.

Nothing but records, trials and events goes through the child: no job, shard or agent
state changes there, so the coordinator's caches of that state (coordinator.fleet.live_agents)
stay right. If the child dies or hangs, the groups it held fail (their agents send those
reports again) and a new child takes the next ones.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future

from coordinator.fleet.group_commit import COMMIT_TIMEOUT_S
from coordinator.fleet.report_ingest import UnreadReport
from foundation.errors import FarmError, RegistryError
from foundation.logs import LogFormat, LogLevel, configure_logging, configured

logger = logging.getLogger("farm.coordinator")
# The child's own records (a bug while it reads or commits a group).
CHILD_LOGGER = "farm.coordinator.ingest"

# How long the child may take to open the registry before the coordinator gives up on it.
START_TIMEOUT_S = 60.0


class IngestProcess:
    """A child process committing groups of reports to the registry at ``registry_url``.

    `submit` hands it a group and returns a Future of one RecordReport (or error) per report,
    or of what the group's transaction raised; calling it waits for that. Groups are sent as
    they come and answered in order: the child reads each group's records while the previous
    transaction commits, and commits what it has read meanwhile together, so that its CPU
    work and the database's overlap.
    """

    def __init__(self, registry_url: str, timeout: float = COMMIT_TIMEOUT_S,
                 log: tuple[LogFormat, LogLevel] | None = None):
        """``log``: the child's log format and level; by default the coordinator's own
        (foundation.logs.configured), else text from warning up."""
        self._url = registry_url
        self._timeout = timeout
        self._log = log or configured() or (LogFormat.TEXT, LogLevel.WARNING)
        self._lock = threading.Lock()  # the child, its pipe and what was sent to it
        self._process = None
        self._conn = None
        # Per group sent and not answered yet, oldest first: (when it was sent, its size, its future).
        self._outstanding: deque[tuple[float, int, Future]] = deque()
        self._closed = False
        with self._lock:
            self._start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _start(self) -> None:
        # spawn, not fork: the coordinator has threads and a gRPC server, which fork would
        # copy half-made.
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=_child_main, args=(child, self._url, self._log), name="farm-ingest",
                                  daemon=True)
        process.start()
        child.close()
        try:
            ready = parent.recv() if parent.poll(START_TIMEOUT_S) else ("error", RegistryError,
                                                                         "the ingest process did not start", None)
        except EOFError:
            ready = ("error", RegistryError, f"the ingest process exited with {process.exitcode} on start", None)
        if ready[0] != "ready":
            process.kill()
            process.join(5)
            parent.close()
            raise _error(ready)
        self._process, self._conn = process, parent
        threading.Thread(target=self._receive, args=(parent,), name="farm-ingest-answers", daemon=True).start()
        logger.info("ingest process %d serving reports", process.pid)

    def __call__(self, reports: Sequence[UnreadReport]) -> list:
        return self.submit(reports).result()

    def submit(self, reports: Sequence[UnreadReport]) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise FarmError("the coordinator is shutting down", "send the report again once it is back")
            if self._process is None or not self._process.is_alive():
                self._restart("it had exited", _died())
            try:
                self._conn.send(("ingest", list(reports)))
            except OSError as err:
                self._restart(f"it went away ({type(err).__name__})", _died())
                raise _died() from None
            self._outstanding.append((time.monotonic(), len(reports), future))
        return future

    def _receive(self, conn) -> None:
        """Hand out the child's answers, in order; restart it when it dies or hangs.

        This thread alone closes ``conn``, once it is done with it: closed from another
        thread while this one waits on it, its descriptor could be reused by the next
        child's pipe and this thread would read that child's answers.
        """
        try:
            self._receive_on(conn)
        finally:
            conn.close()

    def _receive_on(self, conn) -> None:
        while True:
            try:
                ready = conn.poll(min(1.0, self._timeout))
            except (EOFError, OSError):
                ready = None
            with self._lock:
                if conn is not self._conn:
                    return  # that child was replaced or closed
                if ready is False:
                    if self._outstanding and time.monotonic() - self._outstanding[0][0] > self._timeout:
                        sent = self._outstanding[0][1]
                        self._restart(f"it took over {self._timeout:.0f} s", RegistryError(
                            f"the ingest process took over {self._timeout:.0f} s for {sent} report(s) and was "
                            "restarted", "send them again"))
                        return
                    continue
            try:
                answer = conn.recv()
            except (EOFError, OSError) as err:
                with self._lock:
                    if conn is self._conn and not self._closed:
                        self._restart(f"it went away ({type(err).__name__})", _died())
                return
            with self._lock:
                if conn is not self._conn:
                    return  # replaced meanwhile: its groups were failed with it
                _, _, future = self._outstanding.popleft()
            if answer[0] == "ok":
                future.set_result(answer[1])
            else:
                future.set_exception(_error(answer))

    def _fail_outstanding(self, err: FarmError) -> None:
        """Under the lock: the groups the child held are lost with it."""
        lost, self._outstanding = self._outstanding, deque()
        for _, _, future in lost:
            future.set_exception(err)

    def _restart(self, why: str, lost: FarmError) -> None:
        """Under the lock: a new child; the groups the old one held fail with ``lost``."""
        logger.warning("restarting the ingest process: %s", why)
        self._stop_child(kill=True)
        self._fail_outstanding(lost)
        self._start()

    def _stop_child(self, kill: bool) -> None:
        """Under the lock: the child ends, told or killed; its receiver thread sees its pipe close."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if process is None:
            return
        if not kill:
            try:
                conn.send(("stop",))
            except OSError:
                pass
            process.join(10)
        if process.is_alive():
            process.kill()
            process.join(5)
        # Its receiver thread closes the pipe, at the end of it (see _receive).

    def close(self) -> None:
        """Let the child finish what it holds and exit."""
        with self._lock:
            self._closed = True
            conn = self._conn
        if conn is not None:
            # Answered while the child finishes; the receiver then sees the pipe close.
            deadline = time.monotonic() + 10
            while self._outstanding and time.monotonic() < deadline:
                time.sleep(0.01)
        with self._lock:
            self._stop_child(kill=False)
            self._fail_outstanding(
                FarmError("the coordinator is shutting down", "send the report again once it is back"))


def _died() -> RegistryError:
    return RegistryError("the ingest process died while committing reports; it was restarted",
                         "send them again: records already stored count as duplicates")


def _error(answer) -> FarmError:
    _, kind, problem, fix = answer
    return kind(problem, fix) if isinstance(kind, type) and issubclass(kind, FarmError) else RegistryError(problem, fix)


def _child_main(conn, registry_url: str, log: tuple[LogFormat, LogLevel]) -> None:
    # Ctrl-C reaches the terminal's whole process group, and the coordinator drains on it
    # and still needs this process meanwhile: it ends when told, or when the coordinator's
    # end of the pipe closes. (SIGTERM stays fatal: multiprocessing's exit handler sends it.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging(*log, sys.stderr)  # the coordinator's layout: its stderr carries one format
    from coordinator.cluster_store import ClusterStore
    from foundation.processes.heap import freeze_long_lived, tune_collector
    from foundation.registry.store import RegistryStore

    try:
        store = RegistryStore(registry_url)
    except FarmError as err:
        conn.send(("error", type(err), err.problem, err.fix))
        return
    cluster = ClusterStore(store)
    tune_collector()
    freeze_long_lived()
    conn.send(("ready",))
    # Groups read (records parsed, spelled canonically, digested) wait here for the commit:
    # the reader thread reads the next groups while the database commits the last ones.
    read: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_read_groups, args=(conn, read), name="farm-ingest-read", daemon=True).start()
    try:
        while True:
            first = read.get()
            if first is None:
                return
            groups, last = [first], False
            while sum(len(g) for g in groups if isinstance(g, list)) < MAX_REPORTS_PER_COMMIT:
                try:
                    more = read.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    last = True
                    break
                groups.append(more)
            for answer in _commit_groups(cluster, groups):
                conn.send(answer)
            if last:
                return
    finally:
        store.dispose()


# Reports of the groups read meanwhile that one transaction commits together: about as many
# as a thousand agents send while one transaction runs.
MAX_REPORTS_PER_COMMIT = 512


def _read_groups(conn, read: queue.SimpleQueue) -> None:
    from coordinator.fleet.report_ingest import read_report

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            message = ("stop",)
        if message[0] == "stop":
            read.put(None)
            return
        try:
            read.put([read_report(report) for report in message[1]])
        except Exception as err:
            read.put(err)


def _commit_groups(cluster, groups: list) -> list[tuple]:
    """One answer per group: its reports' verdicts, committed together where they can be."""
    readable = [g for g in groups if not isinstance(g, Exception)]
    if len(readable) > 1:
        try:
            verdicts = iter(cluster.reports.ingest_reports([batch for group in readable for batch in group]))
        except Exception:
            pass
        else:
            return [_failure(g, "reading a group of reports") if isinstance(g, Exception)
                    else ("ok", [next(verdicts) for _ in g]) for g in groups]
    answers = []
    for group in groups:
        if isinstance(group, Exception):
            answers.append(_failure(group, "reading a group of reports"))
            continue
        try:
            answers.append(("ok", cluster.reports.ingest_reports(group)))
        except Exception as err:
            answers.append(_failure(err, f"committing {len(group)} report(s)"))
    return answers


def _failure(err: Exception, doing: str) -> tuple:
    """A group's error answer; ``doing`` says what failed."""
    if isinstance(err, FarmError):
        return ("error", type(err), err.problem, err.fix)
    # A bug: answered, logged, and the next group goes on.
    logging.getLogger(CHILD_LOGGER).error("%s failed", doing, exc_info=err)
    return ("error", RegistryError, f"{doing} failed: {type(err).__name__}: {err}", None)
