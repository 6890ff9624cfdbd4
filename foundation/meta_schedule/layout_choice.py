"""Which weights layout an `auto` job tunes: the form whose tasks the registry's records cover.

The rule is foundation.domain.weights_layout.choose_by_coverage; this extracts the model's tasks
in each form `auto` may take and measures each form's coverage: the share of the model's
estimated latency (FLOPs x calls, foundation.domain.trial_plan.latency_shares) whose tasks have
valid measured records in the job's scope (this fingerprint, target and TVM version), matched
structurally by the registry's MetaSchedule database as reuse matches them. The embedded farm and
the coordinator's planner both call `choose_layout`, so one submit chooses alike in either mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.domain.trial_plan import TaskDemand, latency_shares
from foundation.domain.weights_layout import (
    AUTO,
    COVERAGE_MARGIN,
    LayoutChoice,
    WeightsLayout,
    asked,
    auto_forms,
    choose_by_coverage,
)

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.compile import TuningTask
    from foundation.meta_schedule.database.registry_database import RegistryDatabase
    from foundation.models.loaded import LoadedModel


@dataclass(frozen=True)
class ChosenLayout:
    choice: LayoutChoice
    tasks: list["TuningTask"]  # the model's tuning tasks in the chosen form


def coverage(tasks: list["TuningTask"], database: "RegistryDatabase") -> float:
    """The share of the model's estimated latency whose tasks ``database`` has valid measured records of."""
    shares = latency_shares([TaskDemand(t.name, t.flop, t.weight) for t in tasks])
    return sum(share for task, share in zip(tasks, shares) if database.measured_count(task.mod) > 0)


def choose_layout(loaded: "LoadedModel", target: "tvm.target.Target", request: str,
                  database: "RegistryDatabase") -> ChosenLayout:
    """The form a job tunes for ``request`` and the model's tasks in it.

    A named form is taken as asked. For `auto` the default form's tasks are extracted and their
    coverage measured; the other forms are extracted too only when another could cover clearly
    more (the default's coverage leaves room for COVERAGE_MARGIN) and the scope holds records at all.
    """
    from foundation.compile import extract_tuning_tasks

    def tasks_of(form: WeightsLayout) -> list["TuningTask"]:
        return extract_tuning_tasks(loaded, target, prepack=form.prepacks, block_activations=form.blocks_activations)

    kind = target.kind.name
    choice = asked(request, kind)
    tasks = {choice.chosen: tasks_of(choice.chosen)}
    forms = auto_forms(kind)
    if request != AUTO or len(forms) == 1:
        return ChosenLayout(choice, tasks[choice.chosen])
    default = choice.chosen
    covered = {default: coverage(tasks[default], database)}
    if covered[default] <= 1.0 - COVERAGE_MARGIN and len(database) > 0:
        for form in forms:
            if form not in tasks:
                tasks[form] = tasks_of(form)
                covered[form] = coverage(tasks[form], database)
    choice = choose_by_coverage(default, covered)
    return ChosenLayout(choice, tasks[choice.chosen])
