"""What exists only for large fleets: the coordinator's fast path, behind this one seam.

Nothing here decides what happens to a job, a shard or a validation; each piece makes what the
registry holds cheaper to reach or to change, and the coordinator works the same without the
load that needs it. The rest of the coordinator imports these names from here, never the
modules (an import-linter contract in pyproject.toml):

- `GroupCommit` (group_commit): the requests waiting while one transaction runs served by the
  next, together; `COMMIT_TIMEOUT_S`, how long a caller waits for its group.
- `UnreadReport`, `ingest_reports` (report_ingest): reports whose records are read by whoever
  commits them; `IngestProcess` (ingest_process): that, in a child process of its own.
- `ReportPolicy`, `ReportSizing`, `ReportSize` (report_sizing): how large agents' reports are.
- `LiveAgents`, `KnownAgent` (live_agents): agents as the coordinator last saw them, so that
  heartbeats and idle polls need no SQL.
- `ProgressEvents` (progress_events): which progress reports become job events.
- `LoopPacer` (loop_pacing): a burst of answers let out a few per pass of the event loop.

The garbage collector kept from stalling the event loop is coordinator.heap's: the job work
and the server use it too.

Why each exists, and what it was measured to give: docs/benchmarks.md, "Why the fleet path exists".
"""

from .group_commit import COMMIT_TIMEOUT_S, GroupCommit
from .ingest_process import IngestProcess
from .live_agents import KnownAgent, LiveAgents
from .loop_pacing import LoopPacer
from .progress_events import ProgressEvents
from .report_ingest import UnreadReport, ingest_reports
from .report_sizing import ReportPolicy, ReportSize, ReportSizing

__all__ = [
    "COMMIT_TIMEOUT_S",
    "GroupCommit",
    "IngestProcess",
    "KnownAgent",
    "LiveAgents",
    "LoopPacer",
    "ProgressEvents",
    "ReportPolicy",
    "ReportSize",
    "ReportSizing",
    "UnreadReport",
    "ingest_reports",
]
