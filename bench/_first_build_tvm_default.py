"""Child of bench/startup.py: TVM's default tuning path, timed to its first built candidate.

No lean intrinsics, TVM's own LocalBuilder (optionally with a longer timeout). Prints one
JSON line: wall-clock time of the first build result and how many builds failed.
"""

import json
import sys

timeout = float(sys.argv[1])
import tvm  # noqa: E402
from tvm.s_tir import meta_schedule as ms  # noqa: E402

from foundation.compile import extract_tuning_tasks  # noqa: E402
from foundation.meta_schedule.measure import BuildClock, timed_builder  # noqa: E402  (only the clock wrapper)
from foundation.models.loading import load_model  # noqa: E402

target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
model = load_model("mlp-tiny", 1)
tasks = extract_tuning_tasks(model, target)
task = max(tasks, key=lambda t: t.flop)
clock = BuildClock()
builder = timed_builder(ms.builder.LocalBuilder(timeout_sec=timeout), clock)
contexts, weights = [ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                                    search_strategy="evolutionary", task_name=task.name)], [1.0]
ms.tune_tasks(tasks=contexts, task_weights=weights, work_dir="/tmp/farm-bench-default",
              max_trials_global=2, num_trials_per_iter=2, builder=builder, runner="local",
              database=ms.database.MemoryDatabase())
print(json.dumps({"first_build_at": clock.first_build_at, "built": clock.built, "failed": clock.failed}))
