"""A file system of a few hundred KB (a tmpfs) for a test to fill: what a full disk does, for real."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(directory: Path, size_kb: int, *, owner: str | None = None) -> Iterator[Path]:
    """A tmpfs of ``size_kb`` mounted on ``directory`` (owned by the user ``owner``, if given), unmounted
    after; the test is skipped where this process may not mount one (it needs root or CAP_SYS_ADMIN)."""
    directory.mkdir(parents=True, exist_ok=True)
    options = f"size={size_kb}k,mode=0755" + (f",uid={owner},gid={owner}" if owner else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a {size_kb} KB tmpfs to fill (needs root or CAP_SYS_ADMIN): "
                    f"{mounted.stderr.strip() or mounted.returncode}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "--lazy", str(directory)], capture_output=True)


def fill(directory: Path) -> None:
    """Write a file in ``directory`` until its disk refuses more: no byte is left for anyone else."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)


def fill_once_tuning(job, disk: Path) -> tuple[int, str]:
    """Fill ``disk`` as soon as ``job`` (a support.farm_process.FarmProcess of a submit) says it tunes, then
    let it finish: its exit code and everything it wrote on stderr. The process is killed if this fails."""
    try:
        said = []
        for line in job.proc.stderr:  # the tune has begun: its logs and measured batches are being written
            said.append(line)
            if " tune " in line:
                fill(disk)
                break
        code, _out, rest = job.finish()
    finally:
        job.kill()
    return code, "".join(said) + rest
