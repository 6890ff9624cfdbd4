"""CUDA on a box without a GPU: canonical targets, design spaces, builds and the registry's keys (nothing is run).

The farm builds CUDA candidates on agents' CPUs and only measures them on the device, so
everything up to measurement must work here: for described GPUs of two generations, an A100
(sm_80) and an H100 (sm_90). Skipped where TVM cannot find nvcc.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="no nvcc on this machine: CUDA code cannot be compiled here")

A100 = {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "sm_count": 108, "memory_gib": 80,
        "host_triple": "x86_64-pc-linux-gnu"}
# An H100 SXM as CUDA names it; 81559 MiB of memory is 80 GiB rounded up, as the farm rounds.
H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132, "memory_gib": 80,
        "host_triple": "x86_64-pc-linux-gnu"}
GPUS = {"sm_80": A100, "sm_90": H100}


@pytest.fixture(scope="module", autouse=True)
def nvcc_compiles():
    """TVM's default CUDA compiler is NVRTC through the cuda-bindings package, which the farm does not
    install; its CUDA image and bench/gpu_run.sh set nvcc, as here."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TVM_CUDA_COMPILE_MODE", "nvcc")
        yield


@pytest.fixture(scope="module")
def cuda():
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("cuda")
    from foundation.compile import extract_tuning_tasks
    from foundation.hardware.fingerprint import fingerprint_from_details
    from foundation.hardware.targets import canonical_target, to_tvm_target
    from foundation.models.loading import load_model

    target = to_tvm_target(canonical_target("cuda", fingerprint_from_details("cuda", A100)))
    model = load_model("mlp-tiny", 2)
    return target, model, extract_tuning_tasks(model, target)


def test_untuned_model_builds_for_cuda(cuda):
    from foundation.compile import build_library

    target, model, tasks = cuda
    assert [t.name for t in tasks] and target.attrs["arch"] == "sm_80"
    library = build_library(model, target, None)  # every kernel given dlight's default schedule
    assert library[:4] == b"\x7fELF" and len(library) > 10_000


def test_tuning_candidates_build_for_cuda_on_cpus(cuda, tmp_path):
    """A sampled schedule from the farm's CUDA design space builds in the farm's builder."""
    from tvm.s_tir import meta_schedule as ms

    from foundation.hardware.tvm_startup import LeanWorkerInit
    from foundation.meta_schedule.tuner import DEFAULT_TRIALS_PER_TASK, _tune_contexts
    from foundation.meta_schedule.warm_builder import warm_builder

    target, _, tasks = cuda
    context = _tune_contexts(tasks[:1], target, tmp_path, seed=0, planned=[DEFAULT_TRIALS_PER_TASK])[0]
    spaces = context.space_generator.generate_design_space(context.mod)
    assert spaces, "no design space for the CUDA task"
    builder = warm_builder(1, 120.0, LeanWorkerInit("cuda"))
    try:
        [result] = builder.build([ms.builder.BuilderInput(spaces[0].mod, target)])
    finally:
        builder.shutdown()
    assert result.error_msg is None, result.error_msg
    assert Path(result.artifact_path).stat().st_size > 0


def test_cuda_is_never_prepacked(cuda):
    """Prepacking is a CPU form (foundation.domain.weights_layout): a CUDA build or task list
    asked to prepack is refused, and the plain CUDA tasks carry no layout-free marks."""
    from foundation.compile import build_library, extract_tuning_tasks

    target, model, tasks = cuda
    for task in tasks:
        for func in task.mod.functions.values():
            assert "layout_free_buffers" not in (func.attrs or {}), task.name
    with pytest.raises(ValueError, match="only for llvm targets, not cuda"):
        extract_tuning_tasks(model, target, prepack=True)
    with pytest.raises(ValueError, match="only for llvm targets, not cuda"):
        build_library(model, target, None, prepack=True)


# -- bert-tiny for an A100 (sm_80) and an H100 (sm_90) -------------------------------------------------


@pytest.fixture(scope="module", params=sorted(GPUS))
def bert_tiny(request):
    """bert-tiny's CUDA tuning tasks for one described GPU: its fingerprint, target and tasks."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("cuda")
    from foundation.compile import extract_tuning_tasks
    from foundation.hardware.fingerprint import fingerprint_from_details
    from foundation.hardware.targets import canonical_target, to_tvm_target
    from foundation.models.loading import load_model

    fingerprint = fingerprint_from_details("cuda", GPUS[request.param])
    target = to_tvm_target(canonical_target("cuda", fingerprint))
    assert target.attrs["arch"] == request.param
    return fingerprint, target, extract_tuning_tasks(load_model("bert-tiny", 1), target)


def _design_spaces(task, target, work_dir: Path):
    from foundation.meta_schedule.tuner import _tune_contexts

    context = _tune_contexts([task], target, work_dir, seed=0, planned=[8])[0]
    spaces = context.space_generator.generate_design_space(context.mod)
    assert spaces, f"no CUDA design space for {task.name}"
    return spaces


def _sampled_candidate(task, target, work_dir: Path):
    """A schedule of ``task`` that the farm's CUDA search would measure: sampled from its design space by its
    search strategy, with MetaSchedule's GPU postprocessors applied (which reject, for instance, kernels that
    use more shared memory than the target allows)."""
    from tvm.s_tir import meta_schedule as ms

    from foundation.meta_schedule.tuner import _tune_contexts

    context = _tune_contexts([task], target, work_dir, seed=0, planned=[8])[0]
    spaces = context.space_generator.generate_design_space(context.mod)
    assert spaces, f"no CUDA design space for {task.name}"
    context.pre_tuning(max_trials=8, num_trials_per_iter=8, design_spaces=spaces,
                       database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    candidates = context.generate_measure_candidates()
    assert candidates, f"the search sampled no candidate of {task.name}"
    return candidates[0].sch


def test_bert_tiny_has_the_same_cuda_tasks_for_both_generations(bert_tiny):
    _, target, tasks = bert_tiny
    names = [task.name for task in tasks]
    # The encoder's matmuls, attention's softmax and the layer norms are all CUDA tasks.
    assert any("matmul" in n for n in names) and any("softmax" in n for n in names), names
    assert any("layer_norm" in n for n in names), names
    assert all(task.flop > 0 for task in tasks if "matmul" in task.name)


@pytest.mark.slow
def test_bert_tiny_candidates_build_for_the_gpus_arch(bert_tiny, tmp_path):
    """The heaviest task's sampled candidate builds in the farm's builder, and its kernels compile with nvcc
    for this GPU's arch.

    TVM 0.27's build keeps a CUDA module's kernels as CUDA source; the module compiles them when it is
    loaded on the GPU (tvm_callback_cuda_compile, nvcc with TVM_CUDA_COMPILE_MODE=nvcc). So the builder
    here never runs nvcc, and the test runs that compile itself, for the target's arch, as the load would.
    """
    import struct

    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.support import nvcc

    from foundation.hardware.tvm_startup import LeanWorkerInit
    from foundation.meta_schedule.warm_builder import warm_builder

    _, target, tasks = bert_tiny
    heaviest = max(tasks, key=lambda task: task.flop * task.weight)
    candidate = _sampled_candidate(heaviest, target, tmp_path)
    builder = warm_builder(1, 120.0, LeanWorkerInit("cuda"))
    try:
        [result] = builder.build([ms.builder.BuilderInput(candidate.mod, target)])
    finally:
        builder.shutdown()
    assert result.error_msg is None, result.error_msg
    assert Path(result.artifact_path).stat().st_size > 0

    [device_module] = [m for m in tvm.compile(candidate.mod, target).mod.imports if m.kind == "cuda"]
    source = str(device_module.inspect_source("cuda"))
    assert "__global__" in source
    with target:
        fatbin = bytes(nvcc.tvm_callback_cuda_compile(source))
        ptx = bytes(nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")).decode()
    assert struct.unpack("<I", fatbin[:4])[0] == 0xBA55ED50  # a fatbin, as the runtime loads it
    assert f".target {target.attrs['arch']}" in ptx.splitlines()


def test_the_registry_keeps_cuda_records_apart_by_gpu(bert_tiny, registry_url, tmp_path):
    """A record measured on one GPU is seen under its fingerprint only: not by the other generation, and not
    by another GPU given the very same target (the fingerprint alone keys it)."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from foundation.hardware.fingerprint import fingerprint_from_details
    from foundation.hardware.targets import canonical_target, to_tvm_target
    from foundation.meta_schedule.database.registry_database import RegistryDatabase, canonical_target_json
    from foundation.registry import RegistryStore

    fingerprint, target, tasks = bert_tiny
    other = fingerprint_from_details("cuda", next(gpu for arch, gpu in GPUS.items() if arch != target.attrs["arch"]))
    task = max(tasks, key=lambda t: t.flop)
    [trace] = [space.trace for space in _design_spaces(task, target, tmp_path)[:1]]  # a CUDA schedule of it
    store = RegistryStore(registry_url)
    try:
        for gpu in (fingerprint, other):
            store.upsert_fingerprint(gpu.id, "cuda", gpu.summary, gpu.details)

        def database(gpu, target_json):
            return RegistryDatabase(store, gpu.id, target_json, tvm.__version__, {"cuda": "test"})

        mine = canonical_target_json(target)
        measured = database(fingerprint, mine)
        workload = measured.commit_workload(task.mod)
        measured.commit_tuning_record(TuningRecord(trace, workload, [2.5e-5], target,
                                                   ArgInfo.from_prim_func(task.mod["main"])))
        measured.flush()

        again = database(fingerprint, mine)
        assert len(again.get_top_k(again.commit_workload(task.mod), 5)) == 1
        theirs = canonical_target_json(to_tvm_target(canonical_target("cuda", other)))
        for gpu, target_json in ((other, theirs), (other, mine)):
            elsewhere = database(gpu, target_json)
            assert elsewhere.get_top_k(elsewhere.commit_workload(task.mod), 5) == [], (gpu.summary, target_json)
            assert len(elsewhere) == 0
    finally:
        store.dispose()
