"""A registry of several fingerprints' records for plumbing tests of the cross-hardware cost model.

The schedules are real (MetaSchedule's samples of small matmuls' design spaces), the
fingerprints and their times are not: each "box" is a set of device features, and a
schedule's time on it is a made-up function of the schedule's features and the box's peak and
bandwidth. Nothing measured here says how well any model transfers: bench/cost_model_transfer.py
on a registry of real measurements does.
"""

from __future__ import annotations

import numpy as np

from foundation.registry import RegistryStore

from support.tvm_records import matmul_module

# Three made-up CPU boxes: (id, device features).
BOXES = (
    ("cpu-crossbox0001", {"cores": 2, "l1d_kib": 32, "l2_kib": 512, "l3_kib": 32768, "vector_bits": 512,
                          "fma": 1, "peak_gflops": 180.0, "copy_gbps": 20.0, "mhz": 2400}),
    ("cpu-crossbox0002", {"cores": 1, "l1d_kib": 32, "l2_kib": 512, "l3_kib": 32768, "vector_bits": 256,
                          "fma": 1, "peak_gflops": 60.0, "copy_gbps": 12.0, "mhz": 2400}),
    ("cpu-crossbox0003", {"cores": 4, "l1d_kib": 48, "l2_kib": 2048, "l3_kib": 65536, "vector_bits": 256,
                          "fma": 1, "peak_gflops": 320.0, "copy_gbps": 40.0, "mhz": 3000}),
)


def random_schedules(mod, target, count: int) -> list:
    """``count`` distinct random points of ``mod``'s design space, post-processed, as the search samples them."""
    import tvm_ffi
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", task_name="sample")
    spaces = context.generate_design_space()
    out, seen = [], set()
    for seed in range(1, 50 * count):
        schedule = Schedule(mod, seed=seed)
        Trace(spaces[seed % len(spaces)].trace.insts, {}).apply_to_schedule(schedule, remove_postproc=True)
        schedule.enter_postproc()
        if not all(p.apply(schedule) for p in context.space_generator.postprocs):
            continue
        key = int(tvm_ffi.structural_hash(schedule.mod))
        if key not in seen:
            seen.add(key)
            out.append(schedule)
        if len(out) == count:
            break
    return out


def synthetic_seconds(program: np.ndarray, device: dict) -> float:
    """A made-up time: compute-like features over the box's peak plus memory-like features over
    its bandwidth, so that boxes order some schedules differently."""
    compute = float(np.log1p(np.abs(program[:, :40])).sum())
    memory = float(np.log1p(np.abs(program[:, 40:120])).sum())
    return 1e-4 * (1 + 50 * compute / device["peak_gflops"] + 20 * memory / device["copy_gbps"])


def synthetic_registry(url: str, target, sizes=(32, 48), per_workload: int = 30) -> RegistryStore:
    """A registry at ``url`` holding, for each of ``BOXES``, the same random schedules of a
    matmul of each size with ``synthetic_seconds`` as their times."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    from foundation.meta_schedule.database.registry_database import canonical_target_json, tvm_database_for
    from foundation.meta_schedule.warm.cross_samples import program_features

    store = RegistryStore(url)
    target_json = canonical_target_json(target)
    samples = []
    for n in sizes:
        mod = matmul_module(n)
        schedules = random_schedules(mod, target, per_workload)
        candidates = [MeasureCandidate(s, ArgInfo.from_entry_func(s.mod, remove_preproc=True)) for s in schedules]
        programs = program_features(ms.TuneContext(mod=mod, target=target, task_name="synthetic"), candidates)
        samples.append((mod, schedules, candidates, programs))
    for fingerprint_id, device in BOXES:
        store.upsert_fingerprint(fingerprint_id, "cpu", f"synthetic box {fingerprint_id}", {"device": device})
        database = tvm_database_for(store, fingerprint_id, target_json, tvm.__version__, {})
        for mod, schedules, candidates, programs in samples:
            workload = database.commit_workload(mod)
            for schedule, candidate, program in zip(schedules, candidates, programs):
                seconds = synthetic_seconds(program, device)
                database.commit_tuning_record(TuningRecord(schedule.trace, workload, [seconds], target,
                                                           candidate.args_info))
        database.flush()
    return store
