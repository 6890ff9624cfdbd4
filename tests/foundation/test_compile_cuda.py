"""CUDA on a box without a GPU: canonical targets, design spaces and builds (nothing is run).

The farm builds CUDA candidates on agents' CPUs and only measures them on the device, so
everything up to measurement must work here. Skipped where TVM cannot find nvcc.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="no nvcc on this machine: CUDA code cannot be compiled here")

A100 = {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "sm_count": 108, "memory_gib": 80,
        "host_triple": "x86_64-pc-linux-gnu"}


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
