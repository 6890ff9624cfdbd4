"""The models the coordinator's job steps and validation leases need, loaded once and the last few kept."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.onnx_uploads import onnx_path
from foundation.errors import FarmError
from foundation.tvm_ir_lock import TVM_IR_LOCK

if TYPE_CHECKING:  # pragma: no cover
    from foundation.models.loaded import LoadedModel
    from foundation.registry.entities import Model


class ModelCache:
    """Loaded models by registry model id; loading a big one takes seconds, planning and
    building and validation leases all need it, so the last few are kept."""

    def __init__(self, data_dir: Path, size: int = 4):
        self._data_dir = data_dir
        self._size = size
        self._loaded: OrderedDict[str, "LoadedModel"] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, model_id: str, loaded: "LoadedModel") -> None:
        with self._lock:
            self._loaded[model_id] = loaded
            self._loaded.move_to_end(model_id)
            while len(self._loaded) > self._size:
                self._loaded.popitem(last=False)

    def get(self, model: "Model") -> "LoadedModel":
        with self._lock:
            loaded = self._loaded.get(model.id)
            if loaded is not None:
                self._loaded.move_to_end(model.id)
                return loaded
        loaded = load_stored_model(model, self._data_dir)
        self.put(model.id, loaded)
        return loaded


def load_stored_model(model: "Model", data_dir: Path) -> "LoadedModel":
    """The model a registry row describes: a zoo entry, or an ONNX file uploaded earlier."""
    from foundation.models.onnx_import import load_onnx_model
    from foundation.models.zoo import load_zoo_model

    if model.source == "onnx":
        path = onnx_path(data_dir, model.source_digest)
        if not path.is_file():
            raise FarmError(
                f"the ONNX file of model {model.name} ({model.source_digest[:12]}) is not in {path.parent}",
                "submit the file again; the coordinator's data directory lost it",
            )
        with TVM_IR_LOCK:
            return load_onnx_model(path, model.batch)
    with TVM_IR_LOCK:
        return load_zoo_model(model.name, model.batch)
