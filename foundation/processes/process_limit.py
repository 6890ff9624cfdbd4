"""Whether this user may start the processes and threads a tuning job needs, under its process limit (`ulimit -u`),
and open the files it needs, under its open-file limit (`ulimit -n`).

The process limit counts every process and thread of the user, this command's among them. Met halfway
through a job it fails wherever a thread was refused: a candidate's build (the job fails, "Resource
temporarily unavailable"), a pool's thread, or OpenMP's inside the cost model, which ends the process
itself ("libgomp: Thread creation failed", exit 1, no word from the farm). Out of open files, every
candidate fails ("the target may not match this device"). So a job checks first.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from foundation.errors import OutOfResources

# Processes and threads a tuning job starts (measured at 14 at its peak on 2 cores: builder and
# runner workers, TVM's and OpenMP's pools, the farm's own threads), beyond a core's share, and per core.
JOB_BASE = 8
JOB_PER_CORE = 4
FIX = "raise the process limit (`ulimit -u`) or end other processes of this user, and retry"
# Files a tuning job holds open (34 were enough on 2 cores for mlp-tiny, 31 not: worker pipes, logs, the
# registry), beyond a core's share, and per core.
JOB_FILES_BASE = 32
JOB_FILES_PER_CORE = 8


def threads_of_user(uid: int) -> int:
    """The processes and threads running as ``uid`` (real uid, as the kernel counts them for the limit)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:  # ended meanwhile
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1").strip())
    return count


def check_room_for_a_job(cores: int | None = None) -> None:
    """OutOfResources naming the limit when this user may start fewer processes and threads, or this
    process open fewer files, than a tuning job on ``cores`` cores needs (root is bound by the second only)."""
    cores = cores or len(os.sched_getaffinity(0))
    _check_open_files(cores)
    soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft == resource.RLIM_INFINITY or os.geteuid() == 0:
        return
    need = JOB_BASE + JOB_PER_CORE * cores
    running = threads_of_user(os.getuid())
    left = max(0, soft - running)
    if left < need:
        raise OutOfResources(
            f"a tuning job here needs about {need} processes and threads ({cores} cores), and this user may "
            f"start {left} more: this process's limit (`ulimit -u`) is {soft:,}, and {running:,} are running",
            FIX)


def _check_open_files(cores: int) -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = JOB_FILES_BASE + JOB_FILES_PER_CORE * cores
    if soft != resource.RLIM_INFINITY and soft < need:
        raise OutOfResources(
            f"a tuning job here needs about {need} open files ({cores} cores): this process's limit (`ulimit -n`) "
            f"is {soft:,}", "raise the open-file limit (`ulimit -n 1024` or more) and retry")
