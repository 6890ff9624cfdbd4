"""`farm submit --dry-run` on the terminal: the plan a submit would tune by (farm.dry_run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from farm.cli.output import emit_json, print_table, stdout_console

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.submission import Submission


def print_plan(submission: "Submission", registry: str | None, *, json_output: bool) -> None:
    from farm.dry_run import plan_submit
    from farm.submit_values import SubmitRequest
    from foundation.units import duration

    plan = plan_submit(SubmitRequest.of(submission, registry=registry))
    if json_output:
        emit_json(plan.to_json())
        return
    console = stdout_console()
    console.print(f"plan         {plan.model} batch {plan.batch}  target {plan.target}  (dry run: nothing written)")
    console.print(f"fingerprint  {plan.fingerprint}")
    if plan.registry_hit:
        console.print(f"registry hit {plan.registry_hit}: a submit would answer with it and tune nothing "
                      f"(--retune tunes; the plan below is what it would tune)")
    choice = plan.weights_layout_choice
    why = f": {choice.why}" if choice and choice.why else ""
    console.print(f"weights      {plan.weights_layout.value}{why}")
    console.print(f"tasks        {plan.tasks}, budget {plan.budget_trials} trials "
                  f"(at most {plan.budget_per_task} a task)")
    if plan.reuse:
        console.print(f"reuse        {plan.reuse.describe()}")
    rate = plan.trials_per_second
    console.print(f"estimate     {duration(plan.estimated_seconds)} for {plan.trials} trials at this box's "
                  f"{rate:.3g} trials/s" if rate else
                  "estimate     none: the registry has no tuned job of this fingerprint to take a trial rate from")
    trial_plan = plan.trial_plan
    if trial_plan and trial_plan.phases:
        first, rest = trial_plan.phases
        console.print(f"phases       {first} trials first, by the plan below (its 'phase 1' column); then the "
                      f"{rest} left re-planned from what they measure, to the tasks furthest from their ceiling "
                      f"(best time x calls less FLOPs at the box's peak), at most {trial_plan.per_task_cap} a task")
    if trial_plan:
        phased = bool(trial_plan.phases)
        print_table(("task", "trials", "share", "reuse") + (("phase 1",) if phased else ()),
                    [(t.name, t.trials, f"{t.share:.1%}", plan.action(t.name).value)
                     + ((t.phases[0] if t.phases else t.trials,) if phased else ())
                     for t in trial_plan.tasks])
