"""onnxruntime on this box, on a model's ONNX form: what `farm submit --until onnxruntime` must beat."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from foundation.errors import BadInput, FarmError
from foundation.runtime.library_runner import Latency

INSTALL_HINT = "pip install 'tvm-farm[reference]' (onnxruntime), or give a latency instead: --until 20ms"

# An element agrees when |out - ref| <= RTOL*|ref| + ATOL_SCALE*max(1, max|ref|): another
# library's kernels reorder float32 reductions too (bench/timing.py, the evaluation's rule).
RTOL = 1e-3
ATOL_SCALE = 1e-3


def require_onnxruntime() -> None:
    """Refuse at once, before any tuning, when onnxruntime is not installed."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise BadInput("--until onnxruntime needs onnxruntime, which is not installed", INSTALL_HINT) from None


class OnnxRuntimeModel:
    """An ONNX model (a file's bytes, or one the farm exported) in an onnxruntime session on the
    CPU, with its default settings (all optimizations, one intra-op thread per physical core), as
    a user deploying it would run it."""

    def __init__(self, model: bytes, names: Sequence[str], what: str):
        require_onnxruntime()
        import onnxruntime as ort

        try:
            self.session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own types for every malformed or unsupported model
            raise FarmError(f"onnxruntime cannot load {what}: {str(err).splitlines()[0][:300]}",
                            "give a latency instead: --until 20ms") from None
        self.names = list(names)
        self.version = ort.__version__

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(None, self._feed(inputs)))

    def timer(self, inputs: Sequence[np.ndarray]):
        """One call on ``inputs``, returning its wall time in ms (foundation.runtime.interleaved_timing)."""
        feed = self._feed(inputs)
        run = self.session.run

        def one() -> float:
            begin = time.perf_counter()
            run(None, feed)
            return (time.perf_counter() - begin) * 1e3

        return one

    def time(self, inputs: Sequence[np.ndarray], runs: int = 20, warmup: int = 3) -> Latency:
        one = self.timer(inputs)
        for _ in range(warmup):
            one()
        samples = [one() for _ in range(runs)]
        return Latency(mean_ms=statistics.fmean(samples), median_ms=statistics.median(samples),
                       std_ms=statistics.pstdev(samples), runs=runs, warmup=warmup)

    def _feed(self, inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        return {name: np.ascontiguousarray(x) for name, x in zip(self.names, inputs)}


@dataclass(frozen=True)
class Agreement:
    """onnxruntime's outputs against TVM's untuned build of the same model, weights and inputs."""

    passed: bool
    max_abs_err: float
    detail: str = ""

    def to_json(self) -> dict:
        return {"passed": self.passed, "max_abs_err": self.max_abs_err, "rtol": RTOL, "atol_scale": ATOL_SCALE,
                **({"detail": self.detail} if self.detail else {})}


def agreement(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> Agreement:
    """``outputs`` against ``reference`` with numpy's allclose at RTOL and ATOL_SCALE x max(1, max|ref|)."""
    if len(outputs) != len(reference):
        return Agreement(False, float("inf"), f"{len(outputs)} outputs, TVM's build has {len(reference)}")
    passed, max_abs = True, 0.0
    for out, ref in zip(outputs, reference):
        out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
        if out.shape != ref.shape:
            return Agreement(False, float("inf"), f"an output of shape {out.shape}, TVM's is {ref.shape}")
        scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
        passed &= bool(np.allclose(out, ref, rtol=RTOL, atol=ATOL_SCALE * scale))
        max_abs = max(max_abs, float(np.max(np.abs(out - ref))) if out.size else 0.0)
    return Agreement(passed, max_abs)
