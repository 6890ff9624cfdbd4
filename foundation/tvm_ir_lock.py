"""The one lock a process's threads hold while they build, tune or compare TVM IR."""

from __future__ import annotations

import threading

# TVM's Relax BlockBuilder keeps a process-wide stack, and its tensor intrinsics are registered
# process-wide: two threads building Relax modules at once corrupt the stack ("DataflowVar matmul
# is not defined", an AssertionError), and one thread's tuning finds another's intrinsics half
# registered ("TensorIntrin 'dot_16x4_vnni' is not registered"). The coordinator's threads hold it
# around each piece of IR work; an embedded job (farm.embedded) holds it from its plan to its
# commit, so that farm.submit from several threads of one process runs one job at a time.
TVM_IR_LOCK = threading.RLock()
