"""A model's input tensors kept on the device between calls: each call copies its arrays in.

Making a TVM tensor from a numpy array (`tvm.runtime.tensor`) allocates and copies through
Python-side checks: 16 us a call on a Zen 4, where mlp-tiny's kernels take 2-4 us and
onnxruntime's whole call 7 us. Kept tensors are filled instead: on a CPU through numpy views of
their memory (DLPack, no copy), half a microsecond; on a GPU with one host-to-device copy. The
tensors are made again only when a call's shapes or dtypes differ from the last call's, so a
call with a wrong dtype reaches the model as before and is refused there.

Not safe for two calls at once: its caller holds a lock around filling and running.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class ResidentInputs:
    def __init__(self, device):
        self.device = device
        self.on_cpu = device.dlpack_device_type() == 1  # kDLCPU: numpy can view its memory
        self._layout: tuple | None = None
        self._tensors: list = []
        self._views: list[np.ndarray] | None = None

    def fill(self, inputs: Sequence[np.ndarray]) -> list:
        """The device tensors, holding ``inputs``' values."""
        layout = tuple((x.shape, x.dtype) for x in inputs)
        if layout != self._layout:
            self._allocate(inputs)
            self._layout = layout
        if self._views is not None:
            for view, x in zip(self._views, inputs):
                np.copyto(view, x, casting="no")
        else:
            for tensor, x in zip(self._tensors, inputs):
                tensor.copyfrom(np.ascontiguousarray(x))
        return self._tensors

    def _allocate(self, inputs: Sequence[np.ndarray]) -> None:
        import tvm

        self._tensors = [tvm.runtime.empty(x.shape, str(x.dtype), self.device) for x in inputs]
        self._views = None
        if self.on_cpu:
            try:
                self._views = [np.from_dlpack(t) for t in self._tensors]
            except (TypeError, BufferError, RuntimeError):  # a dtype numpy's DLPack does not take
                pass


def host_arrays(result, on_cpu: bool) -> list[np.ndarray]:
    """A VM result (a tensor, or a nested tuple of them) as numpy arrays of their own: copies,
    never views of the VM's memory, which its next call may reuse."""
    if hasattr(result, "numpy"):
        if on_cpu:
            try:
                return [np.from_dlpack(result).copy()]  # 0.5 us against .numpy()'s 7-9 us
            except (TypeError, BufferError, RuntimeError):
                pass
        return [result.numpy()]
    out: list[np.ndarray] = []
    for item in result:
        out.extend(host_arrays(item, on_cpu))
    return out
