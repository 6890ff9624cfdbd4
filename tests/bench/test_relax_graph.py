"""bench/relax_graph.py: the zoo's Relax graphs re-emitted as ONNX compute what TVM computes."""

import numpy as np
import pytest

from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

install_lean_tensor_intrinsics("llvm")

from relax_graph import Unsupported, read_graph, to_onnx  # noqa: E402
from timing import check_outputs  # noqa: E402

from foundation.models.loading import load_model  # noqa: E402


def run_onnx(model, weights, inputs):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(to_onnx(model.mod, weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {spec.name: x for spec, x in zip(model.inputs, inputs)})


def test_mlp_as_onnx_matches_numpy():
    model = load_model("mlp-tiny", 3)
    weights = model.make_weights(0)
    (x,) = model.make_inputs(0)
    named = {spec.name: w for spec, w in zip(model.weights, weights)}
    hidden = np.maximum(x @ named["fc1.weight"] + named["fc1.bias"], 0)
    expected = hidden @ named["fc2.weight"] + named["fc2.bias"]
    (out,) = run_onnx(model, weights, [x])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_weights_are_initializers_and_inputs_stay_inputs():
    model = load_model("bert-tiny", 1)
    onnx_model = to_onnx(model.mod, model.make_weights(0))
    assert [i.name for i in onnx_model.graph.input] == [s.name for s in model.inputs]
    initializers = {i.name for i in onnx_model.graph.initializer}
    assert {name for name, _, _ in read_graph(model.mod).weights} <= initializers
    assert len(onnx_model.graph.output) == 2  # last hidden state and pooled output


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
def test_onnx_and_torch_match_untuned_tvm(name):
    import tvm

    from foundation.compile import build_library
    from foundation.runtime.library_runner import LoadedLibrary

    model = load_model(name, 2)
    weights, inputs = model.make_weights(0), model.make_inputs(0)
    library = LoadedLibrary(build_library(model, tvm.target.Target({"kind": "llvm"}), None), "llvm")
    library.set_weights(weights)
    reference = library(inputs)
    check = check_outputs(run_onnx(model, weights, inputs), reference, "onnxruntime")
    assert check.passed, check
    try:
        import torch  # noqa: F401
        from relax_graph import TorchEager
    except ImportError:
        return  # PyTorch is an optional extra; the ONNX half ran
    check = check_outputs(TorchEager(model.mod, weights)(inputs), reference, "torch")
    assert check.passed, check
