"""The built-in models by name: published architectures written in Relax, with seeded random weights."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from foundation.errors import BadInput

from .loaded import Fill, LoadedModel, TensorSpec, check_batch

# Part of every zoo model's source_digest: bump it when any architecture's graph changes, so
# results tuned for the old graph are not mistaken for the new one.
ZOO_VERSION = "zoo-v1"


@dataclass(frozen=True)
class ZooInput:
    """One graph input; its shape is given without the leading batch dimension."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    fill: Fill

    def spec(self, batch: int) -> TensorSpec:
        return TensorSpec(self.name, (batch, *self.shape), self.dtype, self.fill)


@dataclass(frozen=True)
class ZooEntry:
    """A zoo model's metadata (importable without TVM) and how to build it."""

    name: str
    family: str  # the module under foundation.models that defines network(name)
    description: str
    inputs: tuple[ZooInput, ...]
    published_parameters: int  # what the reference implementation reports; a test checks ours

    @property
    def default_input(self) -> str:
        return ", ".join(f"{i.name}: batch x {'x'.join(map(str, i.shape))} {i.dtype}" for i in self.inputs)

    def network(self):
        """The relax.frontend.nn Module (imports TVM; weights stay unmaterialized shapes)."""
        return importlib.import_module(f"{__package__}.{self.family}").network(self.name)

    def parameter_count(self) -> int:
        """The count `farm models` shows, without importing TVM; tests/test_zoo.py checks that it
        equals network_parameter_count()."""
        return self.published_parameters

    def network_parameter_count(self) -> int:
        """Counted from the network's parameter shapes (imports TVM; materializes no weights)."""
        total = 0
        for _, param in self.network().named_parameters():
            size = 1
            for dim in param.shape:
                size *= int(dim)
            total += size
        return total

    def build(self, batch: int) -> LoadedModel:
        check_batch(batch)
        import tvm
        from tvm.relax.frontend import nn

        net = self.network()
        specs = [i.spec(batch) for i in self.inputs]
        mod, params = net.export_tvm(
            {"forward": {s.name: nn.spec.Tensor(list(s.shape), s.dtype) for s in specs}}
        )
        # The rest of the farm (and MetaSchedule's pipelines) expect the entry point to be "main".
        main = mod["forward"]
        if "global_symbol" in (main.attrs or {}):
            main = main.with_attr("global_symbol", "main")
        mod = tvm.IRModule({"main": main})
        weights = []
        for name, param in params:
            shape = tuple(int(d) for d in param.shape)
            weights.append(TensorSpec(name, shape, str(param.dtype), param.attrs.get("fill") or Fill.he(shape)))
        return LoadedModel(
            name=self.name,
            source="zoo",
            source_digest=zoo_source_digest(self.name),
            batch=batch,
            mod=mod,
            inputs=specs,
            weights=weights,
        )


def image(size: int) -> tuple[ZooInput, ...]:
    return (ZooInput("data", (3, size, size), "float32", Fill.normal(1.0)),)


def token_inputs(seq: int, vocab: int) -> tuple[ZooInput, ...]:
    # All-ones mask: real sequences without padding; token types 0/1 as in sentence pairs.
    return (
        ZooInput("input_ids", (seq,), "int32", Fill.randint(0, vocab)),
        ZooInput("token_type_ids", (seq,), "int32", Fill.randint(0, 2)),
        ZooInput("attention_mask", (seq,), "int32", Fill.const(1)),
    )


ENTRIES = (
    ZooEntry("resnet-18", "resnet", "ResNet-18 (torchvision), ImageNet classifier", image(224), 11_689_512),
    ZooEntry("resnet-50", "resnet", "ResNet-50 v1.5 (torchvision), ImageNet classifier", image(224), 25_557_032),
    ZooEntry("resnet-152", "resnet", "ResNet-152 v1.5 (torchvision), ImageNet classifier", image(224), 60_192_808),
    ZooEntry("vgg-11", "vgg", "VGG-11 without BatchNorm (torchvision), ImageNet classifier", image(224), 132_863_336),
    ZooEntry("mobilenet", "mobilenet", "MobileNetV2 1.0 (torchvision), ImageNet classifier", image(224), 3_504_872),
    ZooEntry("squeezenet_v1.1", "squeezenet", "SqueezeNet 1.1 (torchvision), ImageNet classifier", image(224),
             1_235_496),
    ZooEntry(
        "inception_v3",
        "inception",
        "Inception v3 (torchvision); aux head weights counted, inference graph without it",
        image(299),
        27_161_264,
    ),
    ZooEntry("vit", "vit", "ViT-B/16 (torchvision), ImageNet classifier", image(224), 86_567_656),
    ZooEntry(
        "bert",
        "bert",
        "BERT-base uncased encoder + pooler (Hugging Face BertModel), sequence length 128",
        token_inputs(128, 30522),
        109_482_240,
    ),
    ZooEntry(
        "bert-tiny",
        "bert",
        "BERT with 2 layers, hidden 128, 2 heads (google/bert_uncased_L-2_H-128_A-2), sequence 128",
        token_inputs(128, 30522),
        4_385_920,
    ),
    ZooEntry(
        "resnet-tiny",
        "resnet",
        "CIFAR-style ResNet: 3x3 stem, one basic block per stage (16/32/64), 32x32 input, 10 classes",
        image(32),
        78_042,
    ),
    ZooEntry(
        "mlp-tiny",
        "mlp",
        "64 features -> Linear(128) -> ReLU -> Linear(10): the smallest model to tune",
        (ZooInput("data", (64,), "float32", Fill.normal(1.0)),),
        9_610,
    ),
)

ZOO: dict[str, ZooEntry] = {entry.name: entry for entry in ENTRIES}


def known_models() -> list[str]:
    return list(ZOO)


def zoo_source_digest(name: str) -> str:
    return f"{ZOO_VERSION}:{name}"


def load_zoo_model(name: str, batch: int) -> LoadedModel:
    entry = ZOO.get(name)
    if entry is None:
        raise BadInput(
            f"unknown model '{name}'",
            f"known models: {', '.join(known_models())}; or pass a path to an .onnx file",
        )
    return entry.build(batch)
