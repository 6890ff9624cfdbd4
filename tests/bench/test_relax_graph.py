"""bench/relax_graph.py: the zoo's Relax graphs run by onnxruntime (the product's exporter) and by PyTorch
eager (the bench's emitter) compute what TVM computes. The exporter's own tests are in
tests/foundation/models/test_onnx_export.py."""

import pytest

from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

install_lean_tensor_intrinsics("llvm")

from relax_graph import to_onnx  # noqa: E402
from timing import check_outputs  # noqa: E402

from foundation.models.loading import load_model  # noqa: E402


def run_onnx(model, weights, inputs):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(to_onnx(model.mod, weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {spec.name: x for spec, x in zip(model.inputs, inputs)})


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
