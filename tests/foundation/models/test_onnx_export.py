"""The zoo's Relax graphs exported to ONNX compute what TVM's untuned build computes (onnxruntime runs them)."""

import numpy as np
import pytest

from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
from foundation.models.loading import load_model
from foundation.models.onnx_export import IR_VERSION, to_onnx
from foundation.models.relax_graph import Unsupported, read_graph

install_lean_tensor_intrinsics("llvm")


def run_onnx(model, weights, inputs):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(to_onnx(model.mod, weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {spec.name: x for spec, x in zip(model.inputs, inputs)})


def test_an_mlp_exported_computes_what_numpy_does_with_the_same_weights():
    model = load_model("mlp-tiny", 3)
    weights = model.make_weights(0)
    (x,) = model.make_inputs(0)
    named = {spec.name: w for spec, w in zip(model.weights, weights)}
    expected = np.maximum(x @ named["fc1.weight"] + named["fc1.bias"], 0) @ named["fc2.weight"] + named["fc2.bias"]
    (out,) = run_onnx(model, weights, [x])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_inputs_stay_inputs_and_weights_become_initializers():
    model = load_model("resnet-tiny", 1)
    exported = to_onnx(model.mod, model.make_weights(0))
    assert exported.ir_version == IR_VERSION
    assert [i.name for i in exported.graph.input] == [s.name for s in model.inputs]
    assert {name for name, _, _ in read_graph(model.mod).weights} <= {i.name for i in exported.graph.initializer}


def test_an_op_without_translation_is_refused_by_name():
    from tvm import relax

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 2), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            out = builder.emit_output(relax.op.sin(x))
        builder.emit_func_output(out)
    with pytest.raises(Unsupported, match="relax.sin"):
        to_onnx(builder.get(), [])


def test_a_wrong_weight_count_is_refused():
    model = load_model("mlp-tiny", 1)
    with pytest.raises(ValueError, match="weights for a graph of 4"):
        to_onnx(model.mod, model.make_weights(0)[:2])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet-tiny", "bert-tiny"])
def test_exported_models_agree_with_the_untuned_tvm_build(name):
    import tvm

    from foundation.compile import build_library
    from foundation.runtime.library_runner import LoadedLibrary
    from foundation.runtime.onnx_reference import agreement

    model = load_model(name, 2)
    weights, inputs = model.make_weights(0), model.make_inputs(0)
    library = LoadedLibrary(build_library(model, tvm.target.Target({"kind": "llvm"}), None), "llvm")
    library.set_weights(weights)
    check = agreement(run_onnx(model, weights, inputs), library(inputs))
    assert check.passed and check.max_abs_err < 1e-2, check
    # Other weights in the ONNX model: the check that guards `--until onnxruntime` says no.
    assert not agreement(run_onnx(model, model.make_weights(1), inputs), library(inputs)).passed
