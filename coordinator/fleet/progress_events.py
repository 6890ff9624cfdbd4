"""Which task progress reports become job events: at most one per task a second, and the last one.

Agents send the progress of every task of their shard with each report; a fleet's worth of
them is more than any watcher reads, and the coordinator keeps the latest in memory anyway
(coordinator.hints.TaskProgress). A task's progress becomes an event when a second has passed
since its last one, when it reaches its budget, and, for whatever was held back, when its
shard ends (`held_back`).
"""

from __future__ import annotations

import threading
import time

EVENT_INTERVAL_S = 1.0


class ProgressEvents:
    def __init__(self, interval: float = EVENT_INTERVAL_S):
        self._interval = interval
        self._lock = threading.Lock()
        self._written_at: dict[tuple[str, str], float] = {}
        self._held: dict[str, dict[str, dict]] = {}  # shard id -> task name -> latest unwritten

    def due(self, shard_id: str, items: list[dict]) -> list[dict]:
        """Of a report's progress items (dicts with task_name, trials, budget), those to write now."""
        now = time.monotonic()
        chosen = []
        with self._lock:
            for item in items:
                key = (shard_id, item["task_name"])
                final = item.get("budget") and item.get("trials", 0) >= item["budget"]
                if final or now - self._written_at.get(key, -self._interval) >= self._interval:
                    self._written_at[key] = now
                    self._held.get(shard_id, {}).pop(item["task_name"], None)
                    chosen.append(item)
                else:
                    self._held.setdefault(shard_id, {})[item["task_name"]] = item
        return chosen

    def held_back(self, shard_id: str) -> list[dict]:
        """The latest unwritten item of each task of an ended shard (and forget the shard)."""
        with self._lock:
            held = self._held.pop(shard_id, {})
            for task in [key for key in self._written_at if key[0] == shard_id]:
                del self._written_at[task]
        return list(held.values())
