"""Room in the temporary directory (TMPDIR), where candidates and libraries are built, checked before a build.

LLVM writes its object files there, and a write that fails ends the process from inside LLVM
("LLVM ERROR: IO failure on output stream: No space left on device", exit 1): no error of the farm's
is raised, and the job is left as it was. A build checks first, and says which disk is full.
"""

from __future__ import annotations

import shutil
import tempfile

from foundation.errors import OutOfResources

# Far beyond what a model's objects and library take there (about 3 MB for ResNet-18), and little to ask.
SCRATCH_BYTES = 32 * 1024 * 1024


def check_scratch_space(doing: str) -> None:
    """OutOfResources naming the temporary directory when it has less than SCRATCH_BYTES free for ``doing``."""
    directory = tempfile.gettempdir()
    try:
        free = shutil.disk_usage(directory).free
    except OSError:  # gone, or not readable: the build itself says so
        return
    if free < SCRATCH_BYTES:
        raise OutOfResources(
            f"the disk is full for {directory}, the temporary directory: {free // 1024:,} KiB free, and {doing} "
            f"needs {SCRATCH_BYTES // (1024 * 1024)} MiB there",
            "free some space there, or set TMPDIR to a directory on a disk with room; nothing was half-written")
