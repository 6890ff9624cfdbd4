"""The one lock the coordinator's threads hold while they build or compare TVM IR."""

from __future__ import annotations

import threading

# TVM's Relax BlockBuilder keeps a process-wide stack: two threads building Relax modules at
# once (a Submit loading a new model while the planner reloads another) corrupt it and fail
# with an AssertionError (seen in bench/coordinator_scale.py). All IR work here takes this lock.
TVM_IR_LOCK = threading.RLock()
