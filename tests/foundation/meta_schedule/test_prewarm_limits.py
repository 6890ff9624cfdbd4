"""Starting worker pools ahead (warm_builder.prewarm) is a head start: with no thread to spare
under the process limit, it is skipped with a warning, and the caller goes on."""

from __future__ import annotations

import subprocess
import sys

from support.other_user import drop_to_other_user

# The limit is set once TVM is imported: no new thread can start after it (the user has one process).
PREWARM_WITHOUT_A_THREAD = """
import resource
from tvm.support.popen_pool import PopenPoolExecutor
from foundation.meta_schedule.warm_builder import prewarm

pool = PopenPoolExecutor(max_workers=2)
resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
prewarm(pool, 2, "farm-builder-prewarm")
print("went on")
"""


def test_a_prewarm_that_cannot_start_a_thread_is_skipped_with_a_warning():
    proc = subprocess.run([sys.executable, "-c", PREWARM_WITHOUT_A_THREAD], capture_output=True, text=True,
                          timeout=300, preexec_fn=drop_to_other_user())
    assert proc.returncode == 0 and proc.stdout.strip() == "went on", proc.stderr
    assert "farm-builder-prewarm skipped: can't start new thread" in proc.stderr
    assert "Traceback" not in proc.stderr
