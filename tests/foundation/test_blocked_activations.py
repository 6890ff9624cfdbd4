"""Blocked activations (the prepacked-nchwc form) on a MobileNet-style model: depthwise convolutions
and ReLU6 keep the blocked layout, so no transform pair is left between convolutions; the untuned
and the tuned blocked builds compute what the plain build computes."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _tiny_mobile():
    """A stem conv with ReLU6, then one inverted residual block (1x1 expand, 3x3 depthwise, 1x1
    project, residual), a grouped conv that is not depthwise, a global pool and a classifier."""
    from tvm.relax.frontend import nn

    from foundation.models.layers import BatchNorm2d, Dense, global_avg_pool
    from foundation.models.mobilenet import ConvBN, InvertedResidual

    class TinyMobile(nn.Module):
        def __init__(self):
            self.stem = ConvBN(3, 16, 3, 2)
            self.block = InvertedResidual(16, 16, 1, 2)
            self.grouped = nn.Conv2D(16, 16, 3, 1, 1, groups=2, bias=False)
            self.grouped_bn = BatchNorm2d(16)
            self.classifier = Dense(16, 5)

        def forward(self, data):
            x = self.block(self.stem(data))
            x = nn.relu(self.grouped_bn(self.grouped(x)))
            return self.classifier(global_avg_pool(x))

    return TinyMobile()


@pytest.fixture(scope="module")
def model():
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    from foundation.models.zoo import ZooEntry, image

    class TinyMobileEntry(ZooEntry):
        def network(self):
            return _tiny_mobile()

    return TinyMobileEntry("tiny-mobile", "mobilenet", "test model", image(16), 0).build(1)


@pytest.fixture(scope="module")
def target():
    import tvm

    return tvm.target.Target({"kind": "llvm", "num-cores": 2})


def _outputs(library: bytes, model) -> list:
    from foundation.runtime.library_runner import LoadedLibrary

    loaded = LoadedLibrary(library, "llvm")
    loaded.set_weights(model.make_weights(0))
    return loaded(model.make_inputs(0))


def test_the_block_is_one_vector_of_the_target_when_it_blocks_every_convolution(model):
    import tvm
    from tvm.relax.frontend import nn

    from foundation.blocked_activations import block_for

    def chain(*channels):
        class Convs(nn.Module):
            def __init__(self):
                pairs = zip((3, *channels), channels)
                self.convs = nn.ModuleList([nn.Conv2D(i, o, 3, 1, 1, bias=False) for i, o in pairs])

            def forward(self, x):
                for conv in self.convs:
                    x = conv(x)
                return x

        mod, _ = Convs().export_tvm({"forward": {"x": nn.spec.Tensor([1, 3, 8, 8], "float32")}})
        return mod

    avx512 = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})
    avx2 = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})
    assert block_for(model.mod, avx512) == 16 and block_for(model.mod, avx2) == 8
    assert block_for(chain(32, 64), avx512) == 16
    # 24 channels divide by 8, not by 16: 16 would leave that conv NCHW, between blocked ones.
    assert block_for(chain(32, 24, 64), avx512) == 8


def test_depthwise_convs_and_relu6_keep_the_blocked_layout(model, target):
    from foundation.blocked_activations import block_for, converted_activations
    from foundation.compile import _weights_marked

    block = block_for(model.mod, target)
    with target:
        main = converted_activations(block)(_weights_marked(model))["main"].script()
    convs = [line for line in main.splitlines() if "R.nn.conv2d(" in line]
    depthwise = [line for line in convs if "groups=32" in line]
    grouped = [line for line in convs if "groups=2" in line]
    assert len(convs) == 5 and len(depthwise) == 1 and len(grouped) == 1
    assert f'data_layout="NCHW{block}c"' in depthwise[0] and f'out_layout="NCHW{block}c"' in depthwise[0]
    # A grouped conv that is not depthwise stays NCHW: the one place the layout goes back and forth.
    assert 'data_layout="NCHW"' in grouped[0] and 'out_layout="NCHW"' in grouped[0]
    assert "R.clip(" not in main  # ReLU6 as maximum/minimum, which ConvertLayout carries through
    # Back to NCHW into the grouped conv, after which the model is NCHW to the end: nothing else.
    assert main.count("R.layout_transform(") == 1


def test_the_blocked_build_computes_what_the_plain_build_computes_untuned_and_tuned(model, target, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from foundation.compile import build_library, extract_tuning_tasks
    from foundation.meta_schedule.measure import MeasureSettings, WorkerPools
    from foundation.meta_schedule.tuner import TuningBudget, tune

    plain = _outputs(build_library(model, target), model)
    untuned = _outputs(build_library(model, target, prepack=True, block_activations=True), model)
    for want, got in zip(plain, untuned):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    tasks = extract_tuning_tasks(model, target, prepack=True, block_activations=True)
    depthwise = [task for task in tasks if task.name.startswith("fused_depthwise_conv2d_NCHWc")]
    assert len(depthwise) == 1, [t.name for t in tasks]
    # The task new to MetaSchedule is tuned (the blocked plain convs are the CLI tests'); the
    # others build with their default schedules.
    database = ms.database.MemoryDatabase()
    report = tune(depthwise, target, database, TuningBudget(4, 4, 4), tmp_path,
                  pools=WorkerPools(MeasureSettings(min_repeat_ms=5)), seed=0)
    assert report.tasks[0].best_sec is not None  # candidates of the blocked depthwise conv built and ran
    tuned = _outputs(build_library(model, target, database, prepack=True, block_activations=True), model)
    for want, got in zip(plain, tuned):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
