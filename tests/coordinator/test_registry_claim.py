"""One coordinator per registry: a second `farm coordinator` on the same registry is refused in one
line naming the first (exit 4), and one that died leaves no claim behind. Two coordinators on one
registry each leased the other's jobs to their own agents."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text

from coordinator.registry_claim import ADVISORY_KEY
from foundation.registry.engine import parse_registry_url

from support.farm_process import FarmProcess, run_farm
from support.polling import wait_for


def _coordinator(registry_url: str) -> tuple[str, ...]:
    return ("coordinator", "--registry", registry_url, "--listen", "127.0.0.1:0", "--tracker-listen", "127.0.0.1:0")


def _claimed_by(registry_url: str) -> str:
    """Who holds the registry's claim, as the holder says (coordinator.registry_claim); "" if none."""
    parsed = parse_registry_url(registry_url)
    if parsed.get_backend_name() == "sqlite":
        try:
            with open(parsed.database + ".coordinator", encoding="utf-8") as claim:
                return claim.read()
        except FileNotFoundError:
            return ""
    engine = create_engine(parsed)
    try:
        with engine.connect() as connection:
            names = connection.scalars(text("SELECT application_name FROM pg_stat_activity "
                                            "WHERE datname = current_database()")).all()
    finally:
        engine.dispose()
    return " ".join(n for n in names if n.startswith("farm-coordinator "))


def _serving(registry_url: str, coordinator: FarmProcess) -> str:
    def serving():
        assert coordinator.proc.poll() is None, coordinator.finish(timeout=30)
        holder = _claimed_by(registry_url)
        return f"pid {coordinator.pid} " in holder and "serving 127.0.0.1:" in holder and holder
    return wait_for(serving, 120, f"coordinator {coordinator.pid} serving", interval=0.2)


def test_a_second_coordinator_on_a_registry_is_refused_until_the_first_is_gone(farm_exe, tmp_path, registry_url):
    first = FarmProcess.start(farm_exe, tmp_path / "first", *_coordinator(registry_url))
    try:
        _serving(registry_url, first)
        second = run_farm(farm_exe, tmp_path / "second", *_coordinator(registry_url), timeout=120)
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert second.returncode == 4, second
        assert len(lines) == 1 and lines[0].startswith("error: another coordinator serves the registry at "), lines
        assert f"pid {first.pid} on " in lines[0] and "serving 127.0.0.1:" in lines[0], lines
        assert "Traceback" not in second.stderr
    finally:
        first.kill()  # SIGKILL: nothing of it gets to let go of its claim

    again = FarmProcess.start(farm_exe, tmp_path / "again", *_coordinator(registry_url))
    try:
        _serving(registry_url, again)
        again.interrupt_group()
        code, _, err = again.finish(timeout=120)
        assert code in (0, 130, 143), err
    finally:
        again.kill()


# Who the tests' stand-in for another coordinator says it is.
ELSEWHERE = "pid 1 on elsewhere, serving 192.0.2.1:50051"


def _end_claim(registry_url: str, coordinator: FarmProcess) -> None:
    """Take ``coordinator``'s claim from it as its registry can: the lock file deleted as stale, the
    claim's PostgreSQL session ended by the server."""
    parsed = parse_registry_url(registry_url)
    if parsed.get_backend_name() == "sqlite":
        os.remove(parsed.database + ".coordinator")
        return
    engine = create_engine(parsed)
    try:
        with engine.connect() as connection:
            # Waits (up to 30 s) until the session has ended, so that a claim seen after is a new one.
            connection.execute(text("SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity "
                                    "WHERE datname = current_database() AND application_name LIKE :mine"),
                               {"mine": f"farm-coordinator pid {coordinator.pid} %"})
    finally:
        engine.dispose()


@contextmanager
def _claimed_elsewhere(registry_url: str, coordinator: FarmProcess) -> Iterator[None]:
    """Hold the registry's claim as another coordinator would, taken in the moment ``coordinator``
    lost it (tried again where it took it back first)."""
    parsed = parse_registry_url(registry_url)
    engine = None if parsed.get_backend_name() == "sqlite" else create_engine(parsed)
    held = None
    try:
        for _ in range(20):
            _end_claim(registry_url, coordinator)
            if engine is None:
                held = open(parsed.database + ".coordinator", "a+", encoding="utf-8")
                try:
                    fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    held.close()
                    continue
                held.write(ELSEWHERE)
                held.flush()
                break
            held = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            held.execute(text("SELECT set_config('application_name', :name, false)"),
                         {"name": "farm-coordinator " + ELSEWHERE})
            if held.scalar(text("SELECT pg_try_advisory_lock(:key)"), {"key": ADVISORY_KEY}):
                break
            held.close()
        else:
            raise AssertionError("the coordinator took its claim back each time before the test could")
        yield
    finally:
        if held is not None:
            held.close()
        if engine is not None:
            engine.dispose()


def test_a_claim_lost_while_the_coordinator_runs_is_taken_again(farm_exe, tmp_path, registry_url):
    """A lock file deleted as stale, or the claim's session ended by PostgreSQL, left the coordinator
    running without a claim, and a second one started beside it."""
    first = FarmProcess.start(farm_exe, tmp_path / "first", *_coordinator(registry_url))
    try:
        _serving(registry_url, first)
        _end_claim(registry_url, first)
        _serving(registry_url, first)  # claimed again, by the same process
        second = run_farm(farm_exe, tmp_path / "second", *_coordinator(registry_url), timeout=120)
        assert second.returncode == 4 and f"pid {first.pid} on " in second.stderr, second
    finally:
        first.kill()


def test_a_coordinator_whose_claim_another_took_stops(farm_exe, tmp_path, registry_url):
    """Where another coordinator claimed the registry while this one had lost its claim, this one
    stops, exit 4, saying who holds it: two coordinators never serve one registry for long."""
    first = FarmProcess.start(farm_exe, tmp_path / "first", *_coordinator(registry_url))
    try:
        _serving(registry_url, first)
        with _claimed_elsewhere(registry_url, first):
            code, _, err = first.finish(timeout=120)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 4, err
        assert lines[-1].startswith("error: another coordinator serves the registry at "), lines[-3:]
        assert lines[-1].endswith(f"{ELSEWHERE} (stop that coordinator first, or give this one a registry of "
                                  "its own)"), lines[-1]
        assert "Traceback" not in err
    finally:
        first.kill()
