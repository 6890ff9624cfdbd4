"""`farm` commands as real processes for fault tests: started as a terminal would, watched through the registry."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil
from sqlalchemy import create_engine, text

from foundation.registry.engine import parse_registry_url

from support.polling import wait_for


def farm_env(home: Path) -> dict[str, str]:
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    return env


def run_farm(exe: str, home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *args], env=farm_env(home), capture_output=True, text=True, timeout=timeout)


@dataclass
class FarmProcess:
    """A `farm` command leading its own process group, as a shell runs a foreground job."""

    proc: subprocess.Popen

    @staticmethod
    def start(exe: str, home: Path, *args: str) -> "FarmProcess":
        return FarmProcess(subprocess.Popen([exe, *args], env=farm_env(home), stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, start_new_session=True))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def interrupt_group(self, sig: int = signal.SIGINT) -> None:
        """What a terminal's Ctrl-C does: the signal to every process of the foreground group."""
        os.killpg(self.proc.pid, sig)

    def descendants(self) -> list[int]:
        try:
            return [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.Error:
            return []

    def finish(self, timeout: float = 300) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)


class RegistryProbe:
    """Reads a registry with plain SQL while `farm` processes write it."""

    def __init__(self, url: str):
        self.engine = create_engine(parse_registry_url(url))

    def scalar(self, sql: str, **params):
        with self.engine.connect() as connection:
            return connection.execute(text(sql), params).scalar()

    def rows(self, sql: str, **params) -> list:
        with self.engine.connect() as connection:
            return list(connection.execute(text(sql), params))

    def newest_job(self) -> str | None:
        try:
            return self.scalar("SELECT id FROM jobs WHERE cache_hit = false ORDER BY created_at DESC LIMIT 1")
        except Exception:  # no schema yet: the process is still starting
            return None

    def records_of(self, job_id: str) -> int:
        return self.scalar("SELECT COUNT(*) FROM tuning_records WHERE job_id = :job", job=job_id)

    def job(self, job_id: str) -> dict:
        row = self.rows("SELECT state, error, trials_done, status FROM jobs WHERE id = :job", job=job_id)[0]
        return dict(row._mapping)

    def wait_for_records(self, at_least: int, timeout: float = 300) -> tuple[str, int]:
        """The tuning job, once it has committed ``at_least`` records (measuring is under way)."""

        def committed():
            job_id = self.newest_job()
            if job_id is None:
                return None
            count = self.records_of(job_id)
            return (job_id, count) if count >= at_least else None

        return wait_for(committed, timeout, f"{at_least} committed records", interval=0.2)

    def dispose(self) -> None:
        self.engine.dispose()


def one_error_line(stderr: str) -> str:
    """The one line a failed command writes on stderr (no traceback, no crash report)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


def json_document(stdout: str) -> dict:
    return json.loads(stdout)
