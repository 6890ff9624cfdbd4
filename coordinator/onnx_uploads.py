"""Where the coordinator keeps the ONNX files submitted to it: in its data directory, by content."""

from __future__ import annotations

import threading
from pathlib import Path


def onnx_path(data_dir: Path, sha256: str) -> Path:
    """Where an uploaded ONNX file lives: keyed by content, so equal uploads are one file."""
    return data_dir / "models" / f"{sha256}.onnx"


def store_onnx(data_dir: Path, sha256: str, content: bytes) -> Path:
    path = onnx_path(data_dir, sha256)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed: a planner never reads half a file.
        partial = path.with_suffix(f".{threading.get_ident()}.partial")
        partial.write_bytes(content)
        partial.replace(path)
    return path
