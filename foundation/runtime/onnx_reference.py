"""onnxruntime timed on this box on a model's ONNX file: what `farm submit --until onnxruntime` must beat."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from foundation.errors import BadInput, FarmError
from foundation.runtime.library_runner import Latency

INSTALL_HINT = "pip install 'tvm-farm[reference]' (onnxruntime), or give a latency instead: --until 20ms"


def require_onnxruntime() -> None:
    """Refuse at once, before any tuning, when onnxruntime is not installed."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise BadInput("--until onnxruntime needs onnxruntime, which is not installed", INSTALL_HINT) from None


def time_onnxruntime(path: Path, names: Sequence[str], inputs: Sequence[np.ndarray], runs: int = 20,
                     warmup: int = 3) -> Latency:
    """onnxruntime's latency for ``inputs`` (fed by ``names``) on the CPU, with its default
    settings (all optimizations, one intra-op thread per physical core), as a user deploying the
    file would run it."""
    require_onnxruntime()
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own types for every malformed or unsupported file
        raise FarmError(f"onnxruntime cannot load {path.name}: {str(err).splitlines()[0][:300]}",
                        "give a latency instead: --until 20ms") from None
    feed = {name: np.ascontiguousarray(x) for name, x in zip(names, inputs)}
    for _ in range(warmup):
        session.run(None, feed)
    samples = []
    for _ in range(runs):
        begin = time.perf_counter()
        session.run(None, feed)
        samples.append((time.perf_counter() - begin) * 1e3)
    return Latency(mean_ms=statistics.fmean(samples), median_ms=statistics.median(samples),
                   std_ms=statistics.pstdev(samples), runs=runs, warmup=warmup)
