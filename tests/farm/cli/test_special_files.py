"""FIFOs, devices, huge files and drivers the farm does not install, given where a file or a
registry URL belongs: one line and exit 2, at once, with nothing read whole and nothing written.

Each command runs in a process of its own, with a timeout and a cap on its memory: what these
tests guard against is a command that blocks forever on a FIFO or reads /dev/zero until the box
runs out of memory, which would take an in-process test run down with it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

# Far more than a `farm` command needs to refuse its input, far less than reading /dev/zero takes.
MEMORY_CAP_BYTES = 1 << 30


# prlimit sets the cap and execs the command (same pid). A preexec_fn would fork this threaded
# test process (its tests hold gRPC channels): gRPC's fork handler then started a poller in the
# child, whose epoll file close_fds had closed, and its "epoll_wait error: Bad file descriptor"
# reached the command's stderr before the exec.
CAPPED = ["prlimit", f"--data={MEMORY_CAP_BYTES}"]


def refused(farm_exe: str, home: Path, *args: str, code: int = 2) -> str:
    """Run `farm ARGS`; assert it refused them with one line on stderr and ``code``; that line."""
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    proc = subprocess.run([*CAPPED, farm_exe, *args], env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert proc.stdout == ""
    return lines[0]


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


# Each command that reads the token and TLS files: a client, an agent and the coordinator.
CALLERS = [["jobs", "--coordinator", "127.0.0.1:1"], ["agent", "--coordinator", "127.0.0.1:1"], ["coordinator"]]


@pytest.mark.parametrize("command", CALLERS, ids=lambda command: command[0])
@pytest.mark.parametrize("option", ["--token-file", "--tls-cert"])
def test_a_fifo_as_a_secret_file_is_refused_at_once(farm_exe, home, fifo, command, option):
    pair = ["--tls-key", str(fifo)] if option == "--tls-cert" else []
    line = refused(farm_exe, home, *command, option, str(fifo), *pair)
    assert f"{option} {fifo} is not a regular file" in line


@pytest.mark.parametrize("option", ["--token-file", "--tls-ca", "--tls-cert", "--tls-key"])
def test_dev_zero_as_a_secret_file_is_refused_unread(farm_exe, home, option):
    line = refused(farm_exe, home, "jobs", "--coordinator", "127.0.0.1:1", option, "/dev/zero")
    assert f"{option} /dev/zero is not a regular file" in line


def test_dev_zero_as_the_coordinators_client_ca_is_refused_unread(farm_exe, home):
    line = refused(farm_exe, home, "coordinator", "--tls-client-ca", "/dev/zero")
    assert "--tls-client-ca /dev/zero is not a regular file" in line


def test_a_huge_token_file_is_refused(farm_exe, home, tmp_path):
    huge = tmp_path / "token"
    huge.write_bytes(b"a" * (1 << 20))
    line = refused(farm_exe, home, "jobs", "--coordinator", "127.0.0.1:1", "--token-file", str(huge))
    assert f"--token-file {huge} is larger than 64 KiB" in line


@pytest.mark.parametrize("url", [
    "postgresql+psycopg2://postgres@127.0.0.1/test",
    "postgresql+asyncpg://postgres@127.0.0.1/test",
    "postgresql+pg8000://postgres@127.0.0.1/test",
    "postgresql+bogus://postgres@127.0.0.1/test",
])
def test_a_postgresql_driver_the_farm_does_not_install_is_bad_input(farm_exe, home, url):
    driver = url.split("+")[1].split(":")[0]
    line = refused(farm_exe, home, "jobs", "--registry", url)
    assert f"names the driver '{driver}'" in line and "postgresql+psycopg://" in line


def test_a_sqlite_driver_the_farm_does_not_install_is_bad_input(farm_exe, home, tmp_path):
    line = refused(farm_exe, home, "registry", "init", "--registry", f"sqlite+bogus:///{tmp_path / 'x.db'}")
    assert "names the driver 'bogus'" in line and "sqlite+pysqlite:///" in line
    assert not (tmp_path / "x.db").exists()


def test_a_fifo_as_the_sqlite_registry_is_refused_untouched(farm_exe, home, fifo, tmp_path):
    line = refused(farm_exe, home, "registry", "init", "--registry", f"sqlite:///{fifo}")
    assert f"the registry path {fifo} is not a regular file" in line
    assert not list(tmp_path.glob("fifo-*")), "a journal or WAL file was left"
