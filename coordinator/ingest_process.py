"""The coordinator's ingest process: reported records read and committed outside the serving process.

With a thousand agents the serving process was one core's worth of Python: reading and
writing records took two thirds of it, and heartbeats waited for the GIL behind them
(docs/benchmarks.md, "Coordinator at scale"). Here a child process of its own, with its own
connection to the registry, takes each group of reports the report committer collects
(coordinator.group_commit), reads their records and commits them in one transaction, and
sends back one answer per report. The committer thread only waits on a pipe meanwhile.

Nothing but records, trials and events goes through the child: no job, shard or agent
state changes there, so the coordinator's caches of that state (coordinator.live_agents)
stay right. If the child dies, the group it held fails (its agents send those reports
again) and the next group starts a new child.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
from collections.abc import Sequence

from coordinator.group_commit import COMMIT_TIMEOUT_S
from coordinator.report_ingest import UnreadReport
from farm.errors import FarmError, RegistryError

logger = logging.getLogger("farm.coordinator")

# How long the child may take to open the registry before the coordinator gives up on it.
START_TIMEOUT_S = 60.0


class IngestProcess:
    """A child process committing groups of reports to the registry at ``registry_url``.

    Called with a group (from one thread at a time: the report committer), it returns one
    RecordReport per report, or raises what the group's transaction raised.
    """

    def __init__(self, registry_url: str, timeout: float = COMMIT_TIMEOUT_S):
        self._url = registry_url
        self._timeout = timeout
        self._lock = threading.Lock()
        self._process = None
        self._conn = None
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
        process = context.Process(target=_child_main, args=(child, self._url), name="farm-ingest", daemon=True)
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
        logger.info("ingest process %d serving reports", process.pid)

    def __call__(self, reports: Sequence[UnreadReport]) -> list:
        with self._lock:
            if self._closed:
                raise FarmError("the coordinator is shutting down", "send the report again once it is back")
            if self._process is None or not self._process.is_alive():
                self._restart("it had exited")
            try:
                self._conn.send(("ingest", list(reports)))
                if not self._conn.poll(self._timeout):
                    self._restart(f"it took over {self._timeout:.0f} s")
                    raise RegistryError(f"the ingest process took over {self._timeout:.0f} s for "
                                        f"{len(reports)} report(s) and was restarted", "send them again")
                answer = self._conn.recv()
            except (EOFError, OSError) as err:
                self._restart(f"it went away ({type(err).__name__})")
                raise RegistryError("the ingest process died while committing reports; it was restarted",
                                    "send them again: records already stored count as duplicates") from None
        if answer[0] == "ok":
            return answer[1]
        raise _error(answer)

    def _restart(self, why: str) -> None:
        logger.warning("restarting the ingest process: %s", why)
        self._stop_child(kill=True)
        self._start()

    def _stop_child(self, kill: bool) -> None:
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
        conn.close()

    def close(self) -> None:
        """Let the child finish what it holds and exit."""
        with self._lock:
            self._closed = True
            self._stop_child(kill=False)


def _error(answer) -> FarmError:
    _, kind, problem, fix = answer
    return kind(problem, fix) if isinstance(kind, type) and issubclass(kind, FarmError) else RegistryError(problem, fix)


def _child_main(conn, registry_url: str) -> None:
    # Ctrl-C reaches the terminal's whole process group, and the coordinator drains on it
    # and still needs this process meanwhile: it ends when told, or when the coordinator's
    # end of the pipe closes. (SIGTERM stays fatal: multiprocessing's exit handler sends it.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s farm-ingest: %(message)s")
    from coordinator.heap import freeze_long_lived, tune_collector
    from coordinator.registry.cluster_store import ClusterStore
    from coordinator.registry.store import RegistryStore
    from coordinator.report_ingest import ingest

    try:
        store = RegistryStore(registry_url)
    except FarmError as err:
        conn.send(("error", type(err), err.problem, err.fix))
        return
    cluster = ClusterStore(store)
    tune_collector()
    freeze_long_lived()
    conn.send(("ready",))
    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return
            if message[0] == "stop":
                return
            try:
                conn.send(("ok", ingest(cluster, message[1])))
            except FarmError as err:
                conn.send(("error", type(err), err.problem, err.fix))
            except Exception as err:  # noqa: BLE001 - a bug: answered, logged, and the next group goes on
                logging.getLogger("farm.coordinator").exception("committing %d report(s) failed", len(message[1]))
                conn.send(("error", RegistryError, f"committing reports failed: {type(err).__name__}: {err}", None))
    finally:
        store.dispose()
