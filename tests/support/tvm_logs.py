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


def this_box_llvm_target() -> dict:
    """The llvm target `farm registry import` files records under on this box (its mcpu, cores)."""
    from foundation.hardware.fingerprint import local_fingerprint
    from foundation.hardware.targets import canonical_target

    return canonical_target("llvm", local_fingerprint("llvm"))


def small_tvm_log(work_dir, run_secs=((1e-3,), (2e-3,)), target="llvm"):  # type: ignore[no-untyped-def]
    """A JSONDatabase of one small matmul workload, a record per entry of ``run_secs`` (split factors 2, 4,
    ...) tuned for ``target`` (None: this box's llvm target), written by TVM itself; returns ``work_dir``."""
    from tvm.s_tir import meta_schedule as ms

    from support.tvm_records import matmul_module, tuning_record

    target = this_box_llvm_target() if target is None else target
    work_dir.mkdir(parents=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    workload = database.commit_workload(matmul_module(32))
    for i, secs in enumerate(run_secs):
        database.commit_tuning_record(
            tuning_record(workload, 2 << i, None if secs is None else list(secs), target=target))
    return work_dir


def with_run_secs(record_file, line: int, run_secs: str) -> None:
    """Rewrite the run_secs of ``record_file``'s line ``line`` (from 1) to the JSON text ``run_secs``, as a
    hand-edited or corrupt log would have them (NaN and Infinity spelled as Python's json reads them)."""
    import json

    lines = record_file.read_text().splitlines()
    index, record = json.loads(lines[line - 1])
    head = json.dumps([index, [record[0]]], separators=(",", ":"))[:-2]  # `[index,[trace`
    tail = json.dumps(record[2:], separators=(",", ":"))[1:]  # `target,args_info]`
    lines[line - 1] = f"{head},{run_secs},{tail}]"
    record_file.write_text("\n".join(lines) + "\n")


def long_tvm_log(work_dir, records: int):  # type: ignore[no-untyped-def]
    """A JSONDatabase of ``records`` lines, as a long tuning run leaves one: small_tvm_log's six records
    (this box's target) measured again and again, each line its own measurement; returns ``work_dir``."""
    import json

    small_tvm_log(work_dir, run_secs=[(1e-3,)] * 6, target=None)
    record_file = work_dir / "database_tuning_record.json"
    lines = [json.loads(line) for line in record_file.read_text().splitlines() if line.strip()]
    with record_file.open("w") as out:
        for i in range(records):
            index, record = lines[i % len(lines)]
            out.write(json.dumps([index, [record[0], [1e-3 + i * 1e-9], *record[2:]]]) + "\n")
    return work_dir
