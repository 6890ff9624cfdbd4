"""Following a job to its end: `farm wait JOB`, and `farm status JOB --watch`, which redraws it meanwhile.

Both read the job the way `farm status` does (a coordinator's with --coordinator, else the
registry's, whose dead runners are failed at each read, so no wait outlasts a killed process),
every interval, and end with the job's exit code: 0 succeeded, 1 failed or cancelled, 5 when
--timeout ran out first (the job goes on).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from farm.cli.command import FarmTyper
from farm.cli.coordinator_options import coordinator_options
from farm.cli.options import JOB_ARG, JSON_OPTION, REGISTRY_OPTION, env_option, finite_number
from farm.cli.output import emit_json, print_fields
from farm.cli.views import job_fields, job_line
from farm.connection import Coordinator
from foundation.errors import Interrupted, JobFailed, TimedOut

app = FarmTyper()

# How often `farm wait` reads the job: a registry read or one GetJob call, cheap at this pace.
WAIT_INTERVAL_S = 1.0
# The least --interval: each read of a registry's job also checks its runner is alive.
MIN_INTERVAL_S = 0.1
# Clear the terminal and go home, as watch(1) redraws.
_REDRAW = "\x1b[H\x1b[2J"


@app.command()
@coordinator_options()
def wait(
    job_id: str = JOB_ARG,
    coordinator: Coordinator = None,
    registry: str | None = REGISTRY_OPTION,
    timeout: float | None = env_option(None, "--timeout", command="wait", parser=finite_number(0),
                                       metavar="SECONDS", help="Give up waiting after this many seconds (exit 5)."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Block until JOB ends, then show it: exit 0 if it succeeded, 1 if it failed or was
    cancelled, 5 if --timeout ran out first (the job goes on)."""
    document = follow(job_reader(job_id, coordinator, registry), timeout, WAIT_INTERVAL_S)
    if not json_output:
        print_fields(job_fields(document))
    end(document, timeout, json_output)


def watch(job_id: str, coordinator: Coordinator, registry: str | None, interval: float, timeout: float | None,
          json_output: bool) -> None:
    """`farm status JOB --watch`: the job redrawn every ``interval`` on a terminal; elsewhere one
    line each time it changes, then the job in full."""
    read = job_reader(job_id, coordinator, registry)
    if json_output:
        show = None
    elif sys.stdout.isatty():
        show = _redraw(job_id, interval)
    else:
        show = _changes()
    document = follow(read, timeout, interval, show)
    if not json_output and not sys.stdout.isatty():
        print_fields(job_fields(document))
    end(document, timeout, json_output)


def job_reader(job_id: str, coordinator: Coordinator, registry: str | None) -> Callable[[], dict]:
    """A function that reads the job's document now, as `farm status --json` prints it."""
    if coordinator.address:
        from farm.client import job_json

        client = coordinator.client()
        return lambda: job_json(client.get_job(job_id))
    from farm.registry_jobs import RegistryJobs

    jobs = RegistryJobs.open(registry)
    jobs.get(job_id)  # an unknown job: exit 3 now, not after the first interval
    return lambda: jobs.document(jobs.current(job_id))


def follow(read: Callable[[], dict], timeout: float | None, interval: float,
           show: Callable[[dict], None] | None = None) -> dict:
    """Read the job every ``interval`` seconds (each read shown) until it is final or ``timeout``
    runs out; the last read. SIGINT and SIGTERM stop the wait, not the job."""
    from farm.client import final

    deadline = None if timeout is None else time.monotonic() + timeout
    with _stop_on_signals():
        while True:
            document = read()
            if show is not None:
                show(document)
            left = None if deadline is None else deadline - time.monotonic()
            if final(document["state"]) or (left is not None and left <= 0):
                return document
            time.sleep(interval if left is None else min(interval, left))


def end(document: dict, timeout: float | None, json_output: bool) -> None:
    """The job's exit: its document on success (--json), else the error that says how it ended."""
    from farm.client import final

    shown = document if json_output else None
    job = document["job"]
    if not final(document["state"]):
        raise TimedOut(f"job {job} is still {document['state']} after {timeout:g} s",
                       f"it goes on; `farm wait {job}` waits again", document=shown)
    if document["state"] != "succeeded":
        raise JobFailed(f"job {job} {document['state']}: {document.get('error') or 'no reason recorded'}",
                        f"see `farm status {job}`", document=shown)
    if json_output:
        emit_json(document)


def _redraw(job_id: str, interval: float) -> Callable[[dict], None]:
    def show(document: dict) -> None:
        sys.stdout.write(f"{_REDRAW}every {interval:g} s: farm status {job_id}    {time.strftime('%H:%M:%S')}\n\n")
        print_fields(job_fields(document))

    return show


def _changes() -> Callable[[dict], None]:
    """One line per change of the job's state, trials or status, for a log or a pipe."""
    last: list[str] = []

    def show(document: dict) -> None:
        line = job_line(document)
        if line != (last[0] if last else None):
            last[:] = [line]
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    return show


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM end the wait as an interruption (exit 130 or 143) saying the job goes on."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may handle signals
        yield
        return

    def stop(signum, frame) -> None:
        raise Interrupted("stopped waiting", "the job goes on; `farm status JOB` shows it", signum=signum)

    before = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
