"""Reports sent while the next batch is measured: one in flight, never more.

The agent reports measured records from inside MetaSchedule's commit of them. Sending there
and waiting for the answer stopped the device for each round trip and commit at the
coordinator: with a thousand agents a report takes up to a second to be answered, and the
device measured less by that much (docs/benchmarks.md, "Coordinator at scale"). Here a batch
is handed to a sender thread and the search goes on; the next batch waits only if the
previous report is still unanswered, so reports stay in order, an agent has one in flight at
a time, and a slow coordinator still slows its agents down rather than piling up their records.

An agent killed mid-shard loses at most the batch in flight and the records measured since.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

Batch = TypeVar("Batch", bound=list)


class ReportPipeline(Generic[Batch]):
    """Sends batches with ``report`` on a thread of its own, one at a time, in order.

    An error of a report is raised to the caller by the next `send` or `wait`, and its batch is
    handed back to be sent again (`take_failed`).
    """

    def __init__(self, report: Callable[[Batch], None], name: str = "farm-report"):
        self._report = report
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._in_flight: tuple[Batch, Future] | None = None
        self._failed: Batch | None = None
        self.sent = 0  # records of reports that were answered without error

    def send(self, batch: Batch) -> None:
        """Hand ``batch`` over once the report before it is answered; returns without waiting for this one."""
        self.wait()
        self._in_flight = (batch, self._sender.submit(self._report, batch))

    def wait(self) -> None:
        """Until the report in flight is answered; raises its error, if it had one."""
        if self._in_flight is None:
            return
        batch, future = self._in_flight
        self._in_flight = None
        try:
            future.result()
        except BaseException:
            self._failed = batch
            raise
        self.sent += len(batch)

    def take_failed(self) -> Batch | None:
        """The batch whose report failed, if one did since the last call."""
        failed, self._failed = self._failed, None
        return failed

    def close(self) -> None:
        """Stop the sender thread once the report in flight, if any, ends (`wait` first to have it answered)."""
        self._sender.shutdown(wait=False)
