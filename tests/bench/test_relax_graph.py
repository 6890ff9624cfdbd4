"""bench/relax_graph.py's PyTorch eager emitter computes what TVM computes. The ONNX exporter the
bench also uses is the product's: tests/foundation/models/test_onnx_export.py checks it the same way."""

import pytest

from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

install_lean_tensor_intrinsics("llvm")

from timing import check_outputs  # noqa: E402

from foundation.models.loading import load_model  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet-tiny", "bert-tiny"])
def test_torch_eager_matches_untuned_tvm(name):
    pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra "
                        "(VENV=.venv-bench EXTRAS=test,torch scripts/setup)")
    import tvm
    from relax_graph import TorchEager

    from foundation.compile import build_library
    from foundation.runtime.library_runner import LoadedLibrary

    model = load_model(name, 2)
    weights, inputs = model.make_weights(0), model.make_inputs(0)
    library = LoadedLibrary(build_library(model, tvm.target.Target({"kind": "llvm"}), None), "llvm")
    library.set_weights(weights)
    check = check_outputs(TorchEager(model.mod, weights)(inputs), library(inputs), "torch")
    assert check.passed, check
