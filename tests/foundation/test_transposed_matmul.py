"""A transposed activation folded into the matmul that reads it (the prepacked forms): attention's k^T is
no kernel of its own, a transposed weight keeps its transpose, the plain form is TVM's lowering, and
the folded builds, untuned and tuned, compute what the plain build computes."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _tiny_attention():
    """Attention over 8 tokens of 16 features in 2 heads, then a classifier whose weight is stored
    [out, in] and transposed in the graph (an ONNX Gemm's transB)."""
    from tvm.relax.frontend import nn

    from foundation.models.layers import Dense, multi_head_attention

    class TinyAttention(nn.Module):
        def __init__(self):
            self.q, self.k, self.v = Dense(16, 16), Dense(16, 16), Dense(16, 16)
            self.head = nn.Parameter((4, 16))

        def forward(self, data):
            context = multi_head_attention(self.q(data), self.k(data), self.v(data), heads=2)
            return nn.matmul(context, nn.permute_dims(self.head, [1, 0]))

    return TinyAttention()


@pytest.fixture(scope="module")
def model():
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    from foundation.models.loaded import Fill
    from foundation.models.zoo import ZooEntry, ZooInput

    class TinyAttentionEntry(ZooEntry):
        def network(self):
            return _tiny_attention()

    inputs = (ZooInput("data", (8, 16), "float32", Fill.normal(1.0)),)
    return TinyAttentionEntry("tiny-attention", "bert", "test model", inputs, 0).build(1)


@pytest.fixture(scope="module")
def target():
    import tvm

    return tvm.target.Target({"kind": "llvm", "num-cores": 2})


def _outputs(library: bytes, model) -> list:
    from foundation.runtime.library_runner import LoadedLibrary

    loaded = LoadedLibrary(library, "llvm")
    loaded.set_weights(model.make_weights(0))
    return loaded(model.make_inputs(0))


def _primfunc_names(mod) -> list[str]:
    import tvm

    return [gv.name_hint for gv, func in mod.functions_items() if isinstance(func, tvm.tirx.PrimFunc)]


def test_the_keys_transpose_is_folded_and_the_weights_kept(model, target):
    from tvm import relax

    from foundation.compile import _weights_marked
    from foundation.transposed_matmul import transposed_matmuls_folded

    with target:
        before = relax.transform.CanonicalizeBindings()(_weights_marked(model))
        after = transposed_matmuls_folded(before)
    # Three splits into heads, k's transpose, the heads merged, the classifier's weight transposed.
    assert before["main"].script().count("R.permute_dims(") == 6
    main = after["main"].script()
    assert main.count("R.permute_dims(") == 5  # k's transpose gone; the weight's stays
    # q, k, v, the context and the head stay matmuls; the scores are the one call of a TIR function.
    assert main.count("R.matmul(") == 5 and main.count("R.call_tir(") == 1 and "NT_matmul" in main


def test_the_prepacked_lowering_has_no_transpose_kernel_before_the_scores(model, target):
    from foundation.compile import _weights_marked, lower_for_tuning

    folded = _primfunc_names(lower_for_tuning(_weights_marked(model), target, prepack=True))
    plain = _primfunc_names(lower_for_tuning(model.mod, target))
    assert any(name.startswith("fused_NT_matmul") for name in folded), folded
    assert not any("transpose_transpose" in name for name in folded), folded
    # The plain form is TVM's own lowering: k's two transposes fuse into a kernel of their own there.
    assert any("transpose_transpose" in name for name in plain) and not any("NT_matmul" in n for n in plain), plain


def test_the_folded_build_computes_what_the_plain_build_computes_untuned_and_tuned(model, target, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from foundation.compile import build_library, extract_tuning_tasks
    from foundation.meta_schedule.measure import MeasureSettings, WorkerPools
    from foundation.meta_schedule.tuner import TuningBudget, tune

    plain = _outputs(build_library(model, target), model)
    untuned = _outputs(build_library(model, target, prepack=True), model)
    for want, got in zip(plain, untuned):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    tasks = extract_tuning_tasks(model, target, prepack=True)
    scores = [task for task in tasks if task.name.startswith("fused_NT_matmul")]
    assert len(scores) == 1, [t.name for t in tasks]
    database = ms.database.MemoryDatabase()
    report = tune(scores, target, database, TuningBudget(4, 4, 4), tmp_path,
                  pools=WorkerPools(MeasureSettings(min_repeat_ms=5)), seed=0)
    assert report.tasks[0].best_sec is not None  # candidates of the NT matmul built and ran
    tuned = _outputs(build_library(model, target, database, prepack=True), model)
    for want, got in zip(plain, tuned):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
