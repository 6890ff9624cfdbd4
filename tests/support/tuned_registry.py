"""Farm homes whose registry holds a model tuned for real, made once per test run and copied per test.

Tuning mlp-tiny costs tens of CPU-seconds (a `farm` process, its builder and runner workers, TVM
in each); a test that needs a tuned model, not the tuning, takes a copy of the home a first
`farm submit` tuned: the registry file (its write-ahead log checkpointed first) and the job's
directory (logs), with the document that submit printed (``TunedHome.submitted``) for the tests
that look at what the tuning said. Under pytest-xdist the workers share the one made by whichever
asked first: a file lock in the run's own temporary directory orders them.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SUBMITTED = "submitted.json"


@dataclass(frozen=True)
class TunedHome:
    """A farm home (FARM_HOME) after one `farm submit ... --json` tuned in it; never used directly."""

    home: Path
    document: dict

    @property
    def submitted(self) -> dict:
        """What the tuning submit printed (a copy: tests may change it)."""
        return copy.deepcopy(self.document)

    def copy_to(self, destination: Path) -> Path:
        """A home of the test's own with the same registry and job directories."""
        shutil.copytree(self.home, destination)
        return destination


def run_directory(basetemp: Path) -> Path:
    """The directory of this test run: shared by its pytest-xdist workers (each has its own
    basetemp below it), the basetemp itself without xdist (its parent holds other runs too)."""
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


def tuned_home(run_dir: Path, name: str, farm_exe: str, submit: Sequence[str]) -> TunedHome:
    """The home where ``farm submit *submit --json`` tuned, made by the first caller of this run."""
    made = run_dir / "tuned-homes" / name
    made.parent.mkdir(parents=True, exist_ok=True)
    with open(made.parent / f"{name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait here while the first one tunes
        try:
            if not (made / SUBMITTED).exists():
                _tune(made, farm_exe, submit)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return TunedHome(made / "home", json.loads((made / SUBMITTED).read_text()))


def _tune(made: Path, farm_exe: str, submit: Sequence[str]) -> None:
    shutil.rmtree(made, ignore_errors=True)  # what a failed first attempt left
    home = made / "home"
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    proc = subprocess.run([farm_exe, "submit", *submit, "--json"], env=env, capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"farm submit {' '.join(submit)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    document = json.loads(proc.stdout)
    # Copies are taken of the file alone: what the write-ahead log holds goes into it first.
    with sqlite3.connect(home / "registry.db") as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    # Written last: its presence says the home is complete.
    (made / SUBMITTED).write_text(json.dumps(document))
