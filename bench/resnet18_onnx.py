"""The zoo's resnet-18 rebuilt outside TVM, from the zoo's own weights: as an ONNX graph, and in PyTorch.

Both follow foundation/models/resnet.py op for op: BatchNorm is the zoo's inference-time
scale/shift ([C, 1, 1] vectors), the classifier's weight is stored [in, out]. Neither imports
TVM, so the exported file is a plain ONNX model any runtime can load.

    from foundation.models.loading import load_model
    model = load_model("resnet-18", 1)
    write_resnet18_onnx("resnet18.onnx", model.make_weights(0), model.weights)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

INPUT_NAME = "data"
OUTPUT_NAME = "logits"
# onnxruntime 1.31 refuses IR version 14 (what onnx 1.19's helper writes by default).
IR_VERSION = 10
OPSET = 17


def named_weights(weights: Mapping[str, np.ndarray] | Sequence[np.ndarray], specs=None) -> dict[str, np.ndarray]:
    """Weights by parameter name: a dict as is, or the zoo's list zipped with its TensorSpecs."""
    if isinstance(weights, Mapping):
        return {name: np.asarray(value) for name, value in weights.items()}
    if specs is None:
        raise ValueError("a weight list needs its specs (LoadedModel.weights) to name the tensors")
    if len(specs) != len(weights):
        raise ValueError(f"{len(weights)} weights for {len(specs)} specs")
    named = {}
    for spec, value in zip(specs, weights):
        if tuple(value.shape) != tuple(spec.shape):
            raise ValueError(f"{spec.name}: weight has shape {value.shape}, spec says {spec.shape}")
        named[spec.name] = np.asarray(value)
    return named


def resnet_blocks(names) -> list[tuple[str, int]]:
    """(prefix, stride) of every basic block, in order, read off the parameter names.

    The stride rule is the zoo's: the first block of every stage after the first halves the size.
    """
    found = sorted({(int(m[1]), int(m[2])) for m in (re.match(r"layer(\d+)\.(\d+)\.", n) for n in names) if m})
    return [(f"layer{stage}.{block}", 2 if stage > 1 and block == 0 else 1) for stage, block in found]


def write_resnet18_onnx(path, weights, specs=None, batch: int = 1, size: int = 224) -> None:
    """Write the zoo's resnet-18 (weights from ``weights``) as an ONNX model at ``path``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    params = named_weights(weights, specs)
    used: set[str] = set()
    nodes = []
    counter = iter(range(1_000_000))

    def param(name: str) -> str:
        if name not in params:
            raise KeyError(f"weight {name!r} missing (have {sorted(params)[:5]}...)")
        used.add(name)
        return name

    def op(kind: str, inputs: list[str], **attrs) -> str:
        out = f"{kind.lower()}_{next(counter)}"
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def conv_bn(x: str, prefix: str, conv: str, bn: str, stride: int) -> str:
        w = params[param(f"{prefix}{conv}.weight")]
        k = int(w.shape[-1])
        y = op("Conv", [x, f"{prefix}{conv}.weight"], kernel_shape=[k, k], strides=[stride, stride],
               pads=[k // 2] * 4)
        y = op("Mul", [y, param(f"{prefix}{bn}.weight")])
        return op("Add", [y, param(f"{prefix}{bn}.bias")])

    x = op("Relu", [conv_bn(INPUT_NAME, "", "conv1", "bn1", 2)])
    x = op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for prefix, stride in resnet_blocks(params):
        out = op("Relu", [conv_bn(x, f"{prefix}.", "conv1", "bn1", stride)])
        out = conv_bn(out, f"{prefix}.", "conv2", "bn2", 1)
        if f"{prefix}.downsample.conv.weight" in params:
            identity = conv_bn(x, f"{prefix}.downsample.", "conv", "bn", stride)
        else:
            identity = x
        x = op("Relu", [op("Add", [out, identity])])
    x = op("Flatten", [op("GlobalAveragePool", [x])], axis=1)
    op("Add", [op("MatMul", [x, param("fc.weight")]), param("fc.bias")])
    nodes[-1].output[0] = OUTPUT_NAME  # the last node computes the logits

    unused = set(params) - used
    if unused:
        raise ValueError(f"weights the graph does not use (not a resnet-18?): {sorted(unused)}")
    classes = int(params["fc.weight"].shape[1])
    in_channels = int(params["conv1.weight"].shape[1])
    graph = helper.make_graph(
        nodes,
        "resnet-18",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, [batch, in_channels, size, size])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [batch, classes])],
        initializer=[numpy_helper.from_array(np.ascontiguousarray(params[n], np.float32), n) for n in sorted(used)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tvm-farm bench")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def torch_resnet18(weights, specs=None):
    """The same network in plain PyTorch (no torchvision), in eval mode, holding ``weights``.

    Written the way a PyTorch user deploys resnet-18: nn.Conv2d, nn.BatchNorm2d in eval mode
    (running mean 0, variance 1, eps 0, so it is exactly the zoo's scale/shift) and nn.Linear
    (whose [out, in] weight is the transpose of the zoo's [in, out] one).
    """
    import torch
    from torch import nn

    params = named_weights(weights, specs)

    def tensor(name: str) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(params[name], np.float32))

    def conv_bn(prefix: str, conv: str, bn: str, stride: int) -> nn.Sequential:
        w = tensor(f"{prefix}{conv}.weight")
        out_ch, in_ch, k, _ = w.shape
        c = nn.Conv2d(in_ch, out_ch, k, stride, k // 2, bias=False)
        b = nn.BatchNorm2d(out_ch, eps=0.0)
        with torch.no_grad():
            c.weight.copy_(w)
            b.weight.copy_(tensor(f"{prefix}{bn}.weight").reshape(-1))
            b.bias.copy_(tensor(f"{prefix}{bn}.bias").reshape(-1))
            b.running_mean.zero_()
            b.running_var.fill_(1.0)
        return nn.Sequential(c, b)

    class BasicBlock(nn.Module):
        def __init__(self, prefix: str, stride: int):
            super().__init__()
            self.branch1 = conv_bn(f"{prefix}.", "conv1", "bn1", stride)
            self.branch2 = conv_bn(f"{prefix}.", "conv2", "bn2", 1)
            has_down = f"{prefix}.downsample.conv.weight" in params
            self.downsample = conv_bn(f"{prefix}.downsample.", "conv", "bn", stride) if has_down else None

        def forward(self, x):
            out = self.branch2(torch.relu(self.branch1(x)))
            identity = self.downsample(x) if self.downsample is not None else x
            return torch.relu(out + identity)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn("", "conv1", "bn1", 2)
            self.pool = nn.MaxPool2d(3, 2, 1)
            self.blocks = nn.Sequential(*(BasicBlock(p, s) for p, s in resnet_blocks(params)))
            fc_w = tensor("fc.weight")
            self.fc = nn.Linear(fc_w.shape[0], fc_w.shape[1])
            with torch.no_grad():
                self.fc.weight.copy_(fc_w.t())
                self.fc.bias.copy_(tensor("fc.bias"))

        def forward(self, x):
            x = self.pool(torch.relu(self.stem(x)))
            x = self.blocks(x)
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return ResNet18().eval()
