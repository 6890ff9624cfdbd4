"""The agent's report pipeline: the next batch is measured while a report is in flight, one at a time."""

from __future__ import annotations

import threading

import pytest

from foundation.meta_schedule.database.report_pipeline import ReportPipeline

WAIT_S = 10.0  # a bound on waits that should end at once, not a timing assertion


class GatedReporter:
    """A report call that blocks until the test opens its gate, recording what it saw."""

    def __init__(self):
        self.gate = threading.Semaphore(0)
        self.started = threading.Semaphore(0)
        self.batches: list[list[int]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.fail_next = False
        self._lock = threading.Lock()

    def __call__(self, batch):
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.started.release()
        try:
            assert self.gate.acquire(timeout=WAIT_S), "the test never answered this report"
            if self.fail_next:
                self.fail_next = False
                raise ConnectionError("coordinator away")
            self.batches.append(list(batch))
        finally:
            with self._lock:
                self.in_flight -= 1


def test_send_returns_while_the_report_is_in_flight_and_the_next_waits_for_it():
    reporter = GatedReporter()
    reports = ReportPipeline(reporter)
    reports.send([1, 2])
    assert reporter.started.acquire(timeout=WAIT_S)  # the first report is in flight, unanswered

    second_handed_over = threading.Event()

    def measure_on():
        reports.send([3])
        second_handed_over.set()

    measurer = threading.Thread(target=measure_on)
    measurer.start()
    # Until the first report is answered, the second batch is not handed over.
    assert not second_handed_over.wait(0.3)
    reporter.gate.release()
    assert second_handed_over.wait(WAIT_S)
    measurer.join(WAIT_S)
    reporter.gate.release()
    reports.wait()
    reports.close()
    assert reporter.batches == [[1, 2], [3]]  # in order
    assert reporter.max_in_flight == 1
    assert reports.sent == 3


def test_a_failed_report_is_raised_by_the_next_call_and_its_batch_handed_back():
    reporter = GatedReporter()
    reports = ReportPipeline(reporter)
    reporter.fail_next = True
    reports.send([1, 2])
    reporter.gate.release()
    with pytest.raises(ConnectionError):
        reports.send([3])  # the error of the report before; [3] was not handed over
    assert reports.take_failed() == [1, 2]
    assert reports.take_failed() is None
    reports.send([1, 2, 3])
    reporter.gate.release()
    reports.wait()
    reports.close()
    assert reporter.batches == [[1, 2, 3]] and reports.sent == 3


def test_wait_raises_the_error_of_the_report_in_flight():
    reporter = GatedReporter()
    reports = ReportPipeline(reporter)
    reporter.fail_next = True
    reports.send([7])
    reporter.gate.release()
    with pytest.raises(ConnectionError):
        reports.wait()
    assert reports.take_failed() == [7] and reports.sent == 0
    reports.wait()  # nothing in flight any more
    reports.close()
