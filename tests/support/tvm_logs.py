"""Past logs as a user brings them: a model's tasks tuned by TVM's own `ms.tune_tasks` into a JSONDatabase."""

from __future__ import annotations


def tvm_tuned_log(work_dir, target, tasks):  # type: ignore[no-untyped-def]
    """``tasks`` tuned by MetaSchedule's own tune_tasks and task scheduler into a JSONDatabase in
    ``work_dir`` (the farm lends only its warm builder and runner, whose workers skip TVM's 43 s import)."""
    from tvm.s_tir import meta_schedule as ms

    from foundation.meta_schedule.measure import MeasureSettings, WorkerPools

    pools = WorkerPools(MeasureSettings(min_repeat_ms=5))
    builder, runner = pools.get("llvm")
    work_dir.mkdir(parents=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    try:
        ms.tune_tasks(
            tasks=[ms.TuneContext(mod=t.mod, target=target, space_generator="post-order-apply",
                                  search_strategy=ms.search_strategy.EvolutionarySearch(population_size=64),
                                  task_name=t.name, num_threads="physical") for t in tasks],
            task_weights=[float(t.weight) for t in tasks], work_dir=str(work_dir), max_trials_global=8,
            max_trials_per_task=4, num_trials_per_iter=4, builder=builder, runner=runner, database=database,
            cost_model="xgb",
        )
    finally:
        pools.close()
    return database
