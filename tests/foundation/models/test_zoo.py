"""The model zoo: published parameter counts, names and errors, and tiny models that compile and run."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from foundation.errors import BadInput, FarmError
from foundation.models import ZOO, LoadedModel, TensorSpec, known_models, load_model, load_zoo_model
from foundation.models.loaded import random_inputs, random_weights
from foundation.models.zoo import zoo_source_digest

# torchvision / Hugging Face counts (trainable parameters; BN running stats are buffers).
PUBLISHED_PARAMETERS = {
    "resnet-18": 11_689_512,
    "resnet-50": 25_557_032,
    "resnet-152": 60_192_808,
    "vgg-11": 132_863_336,
    "mobilenet": 3_504_872,
    "squeezenet_v1.1": 1_235_496,
    "inception_v3": 27_161_264,  # with the aux head's weights (aux_logits=True)
    "vit": 86_567_656,
    "bert": 109_482_240,
    "bert-tiny": 4_385_920,
    # 3x3 stem (432 + 32 BN), stages 16/32/64 of one basic block each, fc 64x10.
    "resnet-tiny": 78_042,
    "mlp-tiny": 64 * 128 + 128 + 128 * 10 + 10,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_parameter_count_is_the_published_one(name):
    entry = ZOO[name]
    assert entry.network_parameter_count() == PUBLISHED_PARAMETERS[name]
    assert entry.parameter_count() == PUBLISHED_PARAMETERS[name]


def test_known_models_lists_the_zoo():
    assert sorted(known_models()) == sorted(PUBLISHED_PARAMETERS)
    for name in known_models():
        assert ZOO[name].description and ZOO[name].default_input


def test_zoo_metadata_imports_without_tvm():
    code = (
        "import sys; from foundation.models import known_models, ZOO; known_models(); "
        "assert 'tvm' not in sys.modules, 'tvm imported'; assert 'onnx' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_model_names_the_known_ones():
    with pytest.raises(BadInput) as caught:  # a name outside the zoo is bad input, like a target's
        load_zoo_model("resnet-19", 1)
    assert caught.value.problem == "unknown model 'resnet-19'"
    assert "resnet-18" in caught.value.fix and "mlp-tiny" in caught.value.fix
    assert ".onnx" in caught.value.fix
    with pytest.raises(BadInput):
        load_model("resnet-19", 1)


@pytest.mark.parametrize("batch", [0, -1, 1.5, True])
def test_batch_must_be_positive(batch):
    with pytest.raises(FarmError):
        load_zoo_model("mlp-tiny", batch)


def test_load_model_sends_onnx_paths_to_the_importer(tmp_path):
    with pytest.raises(FarmError, match="ONNX file not found"):
        load_model(str(tmp_path / "missing.onnx"), 1)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_every_zoo_model_builds_with_weights_as_parameters(name):
    model = load_zoo_model(name, 1)
    assert model.source == "zoo" and model.source_digest == f"zoo-v1:{name}" == zoo_source_digest(name)
    assert model.num_parameters == PUBLISHED_PARAMETERS[name]
    main = model.mod["main"]
    params = list(main.params)
    assert len(params) == len(model.inputs) + len(model.weights)
    for var, spec in zip(params, model.inputs + model.weights):
        assert tuple(int(d) for d in var.ty.shape) == spec.shape
        assert var.ty.dtype == spec.dtype
    assert all(spec.shape[0] == 1 for spec in model.inputs)


def test_tensor_spec_round_trips_through_json():
    spec = TensorSpec("data", (2, 3, 4), "float32")
    assert TensorSpec.from_json(spec.to_json()) == spec
    assert TensorSpec.from_json({"name": "x", "shape": [1], "dtype": "int32"}) == TensorSpec("x", (1,), "int32")


def test_specs_alone_reproduce_the_seeded_values():
    """What the registry stores (the specs' JSON) is enough to redraw the same inputs and weights."""
    model = load_zoo_model("resnet-tiny", 2)
    inputs = [TensorSpec.from_json(s.to_json()) for s in model.inputs]
    weights = [TensorSpec.from_json(s.to_json()) for s in model.weights]
    for ours, theirs in zip(model.make_inputs(3), random_inputs(inputs, 3)):
        np.testing.assert_array_equal(ours, theirs)
    for ours, theirs in zip(model.make_weights(3), random_weights(weights, 3)):
        np.testing.assert_array_equal(ours, theirs)


def test_seeded_values_are_deterministic_and_valid():
    model = load_zoo_model("bert-tiny", 2)
    first, second = model.make_inputs(0), model.make_inputs(0)
    for a, b, spec in zip(first, second, model.inputs):
        np.testing.assert_array_equal(a, b)
        assert a.shape == spec.shape and a.dtype == np.dtype(spec.dtype)
    input_ids, token_type_ids, attention_mask = first
    assert input_ids.min() >= 0 and input_ids.max() < 30522 and len(np.unique(input_ids)) > 100
    assert set(np.unique(token_type_ids)) <= {0, 1}
    assert (attention_mask == 1).all()
    assert not np.array_equal(model.make_inputs(1)[0], input_ids)
    weights = model.make_weights(0)
    for a, b, spec in zip(weights, model.make_weights(0), model.weights):
        np.testing.assert_array_equal(a, b)
        assert a.shape == spec.shape
    layer_norm_scale = weights[[w.name for w in model.weights].index("embeddings.LayerNorm.weight")]
    assert (layer_norm_scale == 1).all()


def test_identity_is_stable_and_depends_on_structure_and_batch():
    first = load_zoo_model("resnet-tiny", 1)
    assert first.identity() == load_zoo_model("resnet-tiny", 1).identity()
    assert first.identity() != load_zoo_model("resnet-tiny", 2).identity()
    assert first.identity() != load_zoo_model("mlp-tiny", 1).identity()
    code = "from foundation.models import load_zoo_model; print(load_zoo_model('resnet-tiny', 1).identity())"
    other_process = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert other_process.stdout.strip() == first.identity()


def run(model: LoadedModel, seed: int = 0):
    """Compile untuned for llvm and run on the seeded inputs and weights; a list of numpy outputs."""
    import tvm
    from tvm import relax

    executable = tvm.compile(model.mod, target="llvm")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(a) for a in model.make_inputs(seed) + model.make_weights(seed)]
    out = vm["main"](*args)
    return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]


@pytest.mark.parametrize(
    ("name", "shapes"),
    [
        ("mlp-tiny", [(3, 10)]),
        ("resnet-tiny", [(3, 10)]),
        ("bert-tiny", [(3, 128, 128), (3, 128)]),
    ],
)
def test_tiny_models_compile_and_run(name, shapes):
    outputs = run(load_zoo_model(name, 3))
    assert [o.shape for o in outputs] == shapes
    for output in outputs:
        assert np.isfinite(output).all()
        assert output.std() > 1e-3  # random weights give varied outputs, not a constant


def test_mlp_tiny_matches_numpy():
    model = load_zoo_model("mlp-tiny", 4)
    (data,) = model.make_inputs(7)
    weights = dict(zip((w.name for w in model.weights), model.make_weights(7)))
    hidden = np.maximum(data @ weights["fc1.weight"] + weights["fc1.bias"], 0)
    expected = hidden @ weights["fc2.weight"] + weights["fc2.bias"]
    np.testing.assert_allclose(run(model, seed=7)[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("name", "tasks"), [("mlp-tiny", 2), ("resnet-tiny", 12)])
def test_tiny_models_extract_tuning_tasks(name, tasks):
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    target = tvm.target.Target("llvm")
    with target:
        mod = tvm.transform.Sequential(
            [
                relax.transform.DecomposeOpsForInference(),
                relax.transform.CanonicalizeBindings(),
                relax.pipeline.zero_pipeline(),
            ]
        )(load_zoo_model(name, 1).mod)
    extracted = ms.relax_integration.extract_tasks(mod, target)
    assert len(extracted) == tasks
    # Weights are inputs, so a weight-only op (a transpose, a reshape) would be a task of its own.
    assert not any(t.task_name.startswith("transpose") for t in extracted)
