"""What the coordinator keeps in memory only, as hints: rebuilt from the registry, or harmless, when missing.

Each is thread-safe and shared by the parts of the Coordinator that fill and read it
(coordinator.service): a restarted coordinator starts with none of them and loses nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from coordinator.cluster_store import ClusterStore

# Events read per query when a job's progress is rebuilt from its log.
_EVENTS_PER_READ = 1000


class TaskProgress:
    """The latest progress each task of a job reported (its trial errors count for `farm status`);
    a job not seen since this process started is read back from its task_progress events."""

    def __init__(self, cluster: ClusterStore):
        self._cluster = cluster
        self._lock = threading.Lock()
        self._latest: dict[str, dict[tuple[str, str], dict]] = {}  # job id -> (shard id, task) -> item

    def note(self, job_id: str, shard_id: str, items: Sequence[dict]) -> None:
        """Progress items (dicts with task_name, build_errors, run_errors, ...) of an accepted report."""
        with self._lock:
            latest = self._latest.setdefault(job_id, {})
            for item in items:
                latest[(shard_id, item["task_name"])] = dict(item)

    def trial_errors(self, job_id: str) -> int:
        """Candidates of the job that failed to build or run, as its tasks last reported."""
        with self._lock:
            progress = self._latest.get(job_id)
        if progress is None:
            progress = self._read_back(job_id)
            with self._lock:
                progress = self._latest.setdefault(job_id, progress)
        return sum(int(p.get("build_errors", 0)) + int(p.get("run_errors", 0)) for p in progress.values())

    def _read_back(self, job_id: str) -> dict[tuple[str, str], dict]:
        progress: dict[tuple[str, str], dict] = {}
        after = 0
        while True:
            events = self._cluster.events.events_after(job_id, after, _EVENTS_PER_READ)
            for event in events:
                if event.kind == "task_progress":
                    progress[(event.payload.get("shard_id", ""), event.payload.get("task_name", ""))] = event.payload
            if len(events) < _EVENTS_PER_READ:
                return progress
            after = events[-1].sequence


class WorkloadJson:
    """The save_json form of the workloads handed to agents, converted once per workload."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_workload: dict[int, str] = {}

    def of(self, workload_id: int, stored_json: str) -> str:
        """The form agents load of a workload the registry stores as ``stored_json``."""
        from foundation.meta_schedule.database.registry_database import module_json

        with self._lock:
            cached = self._by_workload.get(workload_id)
        if cached is None:
            cached = module_json(stored_json)
            with self._lock:
                self._by_workload[workload_id] = cached
        return cached


class RpcServerFlags:
    """Whether each agent's RPC server was serving at its last heartbeat (`farm agents` shows it)."""

    def __init__(self) -> None:
        self._serving: dict[str, bool] = {}  # one item set or read at a time: the GIL suffices

    def note(self, agent_id: str, serving: bool) -> None:
        self._serving[agent_id] = serving

    def serving(self, agent_id: str) -> bool:
        return self._serving.get(agent_id, False)
