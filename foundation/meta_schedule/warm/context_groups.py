"""A cost model's samples grouped by workload and by the timing context they were timed in.

XGBModel labels each sample by the fastest sample of its group (``FeatureGroup.min_cost``) and groups
them by the workload's module hash. Times taken in two timing contexts do not compare: a kernel timed
after its weights were flushed, set against the same workload's best timed warm, reads as a slow
schedule when it may be the one that streams its weights best. So each context's samples of a workload
are a group of their own. The warm group keeps MetaSchedule's key, the module hash: a model stored
before records kept their context, and a search timed warm throughout, see the groups they always had.

XGBModel keys a group inside its own ``update``; ``samples_filed_in`` moves the context's group under
that key for the length of one update and back after it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.utils import shash2hex

from foundation.domain.timing_context import TimingContext

WARM = TimingContext.WARM.value


def group_key(module_hash: str, timing_context: str) -> str:
    """The key of the group that holds a workload's samples timed in ``timing_context``."""
    return module_hash if timing_context == WARM else f"{module_hash}@{timing_context}"


def _samples_of(model: Any):
    """The XGBModel whose groups ``model`` keeps: itself, or the own model a CrossCostModel teaches."""
    return getattr(model, "own", model)


@contextmanager
def samples_filed_in(model: Any, module_hash: str, timing_context: str) -> Iterator[None]:
    """While open, ``model.update`` of the workload hashed ``module_hash`` adds its samples to the
    group of ``timing_context`` (a retraining inside it sees every group, each under some key)."""
    key = group_key(module_hash, timing_context)
    if key == module_hash:
        yield
        return
    groups = _samples_of(model).data
    warm = groups.pop(module_hash, None)
    own = groups.pop(key, None)
    if own is not None:
        groups[module_hash] = own
    try:
        yield
    finally:
        filed = groups.pop(module_hash, None)
        if filed is not None:
            groups[key] = filed
        if warm is not None:
            groups[module_hash] = warm


@derived_object
class ContextGroupedModel(PyCostModel):
    """``model`` as a search uses it, each update filed in the group of the task's timing context
    (``contexts``: module hash of each task's TuneContext -> the context its candidates are timed in)."""

    def __init__(self, model: Any, contexts: Mapping[str, str]):
        super().__init__()
        self.model = model
        self.contexts = dict(contexts)

    def update(self, context, candidates, results) -> None:
        module_hash = shash2hex(context.mod)
        with samples_filed_in(self.model, module_hash, self.contexts.get(module_hash, WARM)):
            self.model.update(context, candidates, results)

    def predict(self, context, candidates):
        return self.model.predict(context, candidates)

    def load(self, path: str) -> None:
        self.model.load(path)

    def save(self, path: str) -> None:
        self.model.save(path)


def grouped_by_context(model: Any, tune_contexts, timing_contexts) -> Any:
    """``model``, or (when a task is timed in a context other than warm) ``model`` wrapped so that each
    task's samples go to its context's group; ``tune_contexts`` and ``timing_contexts`` run in step."""
    contexts = {shash2hex(c.mod): timed for c, timed in zip(tune_contexts, timing_contexts)}
    if all(timed == WARM for timed in contexts.values()):
        return model
    return ContextGroupedModel(model, contexts)
