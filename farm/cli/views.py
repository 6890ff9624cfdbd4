"""What the listing commands show people: jobs, agents and artifacts as rows of words and human units.

Every view reads the same JSON documents `--json` prints (a job's read once, typed, as farm.Job), or the
registry's entities, so the two never disagree; nothing here prints a Python value as Python would (no
``None``, no dicts).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

from farm.cli.units import age
from farm.job_document import Job, Latency
from foundation.domain.jobs import JobState
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.trial_plan import TrialPlan
from foundation.domain.weights_layout import WeightsLayout
from foundation.units import duration, milliseconds, size, speedup_text

JOB_COLUMNS = ("job", "state", "model", "batch", "target", "trials", "fingerprint", "age", "status")
AGENT_COLUMNS = ("agent", "state", "fingerprint", "device", "host", "lease", "trials/s", "rpc", "last beat")
ARTIFACT_COLUMNS = ("artifact", "model", "batch", "target", "fingerprint", "latency", "speed-up", "validated",
                    "size", "age")


def _when(value: str | dt.datetime | None) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(value)


def _trials(done: int, budget: int, errors: int = 0) -> str:
    if not budget and not done:
        return "-"
    text = f"{done}/{budget}" if budget else str(done)
    return text + (f" ({errors} failed)" if errors else "")


def _target_kind(target: str, kind: str = "") -> str:
    """A target's kind from its canonical JSON (or the kind already known)."""
    if kind:
        return kind
    try:
        return json.loads(target).get("kind", target)
    except (ValueError, AttributeError):
        return target or "-"


def job_row(doc: Mapping[str, Any]) -> list[Any]:
    """A row of `farm jobs` from a job document (farm.job_document)."""
    job = Job.from_document(doc)
    state = job.state + (" (hit)" if job.cache_hit else "")
    return [job.id, state, job.model, job.batch, _target_kind(job.target, job.target_kind),
            _trials(job.trials, job.trials_budget, job.trial_errors or 0), job.fingerprint, age(job.created_at),
            job.status]


def registry_job_row(job, model) -> list[Any]:
    """A row of `farm jobs` from a registry Job and its Model (without a coordinator)."""
    state = job.state + (" (hit)" if job.cache_hit else "")
    return [job.id, state, model.name if model else job.model_id[:12], model.batch if model else None,
            _target_kind(job.target, job.target_kind), _trials(job.trials_done, job.trials_budget),
            job.fingerprint_id, age(job.created_at), job.status or job.error]


def job_line(doc: Mapping[str, Any]) -> str:
    """A job on one line, as `farm status --watch` logs each change: id, state, trials, status."""
    job = Job.from_document(doc)
    trials = _trials(job.trials, job.trials_budget, job.trial_errors or 0)
    return "  ".join(part for part in (job.id, job.state, f"trials {trials}", job.status) if part)


def jobs_described(states: list[str], model: str | None) -> str:
    """What `farm jobs` looked for, for the line that says it found none: "failed jobs of resnet-18"."""
    return (f"{' or '.join(states)} " if states else "") + "jobs" + (f" of {model}" if model else "")


def job_fields(doc: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """`farm status`: the job's fields, `kubectl describe` style, from its document (farm.job_document)."""
    job = Job.from_document(doc)
    shards = ", ".join(f"{count} {state}" for state, count in (job.shards or {}).items() if count)
    choice, artifact = job.weights_layout_choice, job.artifact
    fields = [
        ("Job", job.id),
        ("State", job.state + ("  (answered from the registry)" if job.cache_hit else "")),
        ("Status", job.status),
        ("Model", f"{job.model}, batch {job.batch}"),
        ("Target", job.target or job.target_kind),
        ("Weights", _weights_text(job.weights_layout)),
        ("Why", choice.why if choice else None),
        ("Fingerprint", job.fingerprint or "not chosen yet: the first agent of its target kind decides"),
        ("Trials", _trials(job.trials, job.trials_budget, job.trial_errors or 0)),
        ("Plan", "\n".join(plan_lines(job.trial_plan)) if job.trial_plan else None),
        ("Shards", shards or "none yet"),
        ("Reuse", job.reuse.describe() if job.reuse else None),
        ("Until", until_text(job.until, job.state) if job.until else None),
        ("Warm start", job.warm_start.describe() if job.warm_start else None),
        ("Created", _ago(job.created_at)),
        ("Started", _ago(job.started_at)),
        ("Finished", _ago(job.finished_at)),
        ("Runner", job.runner),
        ("Error", job.error),
    ]
    for failed in job.failed_shards:
        reasons = "; ".join(f"attempt {a.attempt} on {a.agent}: {a.reason}" for a in failed.attempts)
        fields.append((f"Failed {failed.shard}", f"tasks {', '.join(failed.tasks)}: {reasons}"))
    if artifact:
        fields.append(("Artifact", f"{artifact.id}  {size(artifact.size)}  sha256 {artifact.sha256}"))
        fields.append(("Latency", latency_text(artifact.latency, artifact.untuned_mean_ms)))
        if artifact.speed:  # the tuned library against the untuned build, timed interleaved
            fields.append(("Against untuned", artifact.speed.describe()))
        fields.append(("Built untuned", job.built_untuned.describe() if job.built_untuned else None))
    return fields


def until_text(until: RoundsOutcome, state: JobState) -> str:
    """How tuning in rounds (`--until`) ended, or where it is."""
    judged = f"{len(until.rounds)} round{'s' * (len(until.rounds) != 1)} judged"
    if until.ending is None and state in (JobState.CANCELLED, JobState.FAILED):
        # Ended between rounds (a cancel, a failed shard): no stop condition was reached.
        return f"{state} while tuning in rounds until {until.goal.describe()}, after {judged}"
    if until.rounds or until.ending is not None:
        return until.summary()
    # No round judged yet: a coordinator knows only the goal, not yet what it stands for in ms.
    return f"tuning in rounds until {until.goal.describe()}: {judged} so far"


def _weights_text(layout: WeightsLayout | None) -> str | None:
    if layout is WeightsLayout.PREPACKED:
        return "prepacked (the library rearranges plain weights once, at load)"
    if layout is WeightsLayout.PREPACKED_NCHWC:
        return "prepacked-nchwc (weights rearranged once, at load; activations in blocks of 8 or 16 channels)"
    return layout.value if layout else None


def plan_lines(plan: TrialPlan | Mapping[str, Any]) -> list[str]:
    """A trial plan for people (or its TrialPlan.to_json, as JobObserver.planned is told it): the sum, then
    each task tuned, largest share first, then the tasks with nothing to tune on one line."""
    if isinstance(plan, Mapping):
        plan = TrialPlan.from_json(plan)
    tasks = plan.tasks
    tuned = sorted((t for t in tasks if not t.minor), key=lambda t: -t.share)
    minor = [t for t in tasks if t.minor]
    width = max((len(t.name) for t in tuned), default=0)
    if any(t.in_model_ms is not None for t in tasks):  # after a round of --until: foundation.job_driver.in_model_times
        basis = ("share of what the model loses: its time inside the last round's model less its ceiling "
                 "(the least its work can take here)")
    else:
        basis = "share of the model's latency" + (" (measured where the registry has records)"
                                                  if any(t.measured for t in tasks)
                                                  else " (estimated from FLOPs x calls)")
    phases = plan.phases
    if phases and any(len(t.phases) > 1 for t in tasks):  # tuned in two phases: what each gave
        basis = (f"share of what it lost against its ceiling after the first phase ({phases[0]} trials by "
                 f"FLOPs, then {phases[1]} re-planned)")
    elif phases:
        basis += f"; {phases[0]} in a first phase, the {phases[1]} left re-planned from what it measures"
    lines = [f"{plan.total} of {plan.budget} trials over {len(tasks)} tasks, by each task's {basis}"]
    lines += [f"{t.name:<{width}}  {t.share:>6.1%}  {t.trials:>5} trials"
              + (f"  ({t.in_model_ms:.3f} ms in the model, {t.loss_ms or 0.0:.3f} ms above its ceiling)"
                 if t.in_model_ms is not None else "")
              + (f"  ({t.phases[0]} + {t.phases[1]}, {t.loss_ms:.3f} ms above its ceiling)"
                 if len(t.phases) > 1 and t.loss_ms is not None else "") for t in tuned]
    if minor:
        lines.append(f"{len(minor)} with nothing to tune: " + ", ".join(f"{t.name} {t.trials}" for t in minor))
    return lines


def latency_text(latency: Latency | Mapping[str, Any], untuned_ms: float | None = None) -> str:
    """A library's latency (or a document's `latency_ms`), and its speed-up over the untuned build."""
    if isinstance(latency, Mapping):
        latency = Latency.from_json(latency)
    text = (f"{milliseconds(latency.mean_ms)} mean, {milliseconds(latency.median_ms)} median, "
            f"{milliseconds(latency.std_ms)} std")
    if untuned_ms and latency.mean_ms:
        text += f"  (untuned {milliseconds(untuned_ms)}: {speedup_text(untuned_ms, latency.mean_ms)})"
    return text


def _ago(when: dt.datetime | None) -> str | None:
    return None if when is None else f"{age(when)} ago"


def agent_row(doc: dict) -> list[Any]:
    """A row of `farm agents` from an agent document (farm.client.agent_json)."""
    leases = ", ".join(f"{r['shard_id']}#{r['attempt']}" for r in doc["running_leases"])
    # A GPU agent's fingerprint names its device first ("NVIDIA A100-SXM4-40GB, sm_80, ...").
    device = (f"cuda: {doc['fingerprint_summary'].split(',', 1)[0]}" if "cuda" in doc["target_kinds"]
              and doc.get("fingerprint_summary") else "cuda" if "cuda" in doc["target_kinds"] else "cpu")
    return [doc["id"], doc["state"], doc["fingerprint_id"], device, doc["hostname"], leases,
            f"{doc['trials_per_second']:.2g}" if doc["trials_per_second"] else "-",
            "serving" if doc["rpc_server_serving"] else "down", f"{age(_when(doc['last_heartbeat']))} ago"
            if doc["last_heartbeat"] else "-"]


def artifact_rows(artifacts: Iterable, models: dict[str, Any]) -> list[list[Any]]:
    """Rows of `farm registry ls` from registry Artifacts, newest first."""
    rows = []
    for a in sorted(artifacts, key=lambda a: a.created_at, reverse=True):
        model = models.get(a.model_id)
        speedup = (f"{a.untuned_latency_mean_ms / a.latency_mean_ms:.2f}x"
                   if a.untuned_latency_mean_ms and a.latency_mean_ms else None)
        rows.append([a.id, model.name if model else a.model_id[:12], model.batch if model else None,
                     _target_kind(a.target), a.fingerprint_id, duration(a.latency_mean_ms / 1e3), speedup,
                     "yes" if (a.validation or {}).get("passed") else "no", size(a.size), age(a.created_at)])
    return rows


def field_value(value: Any) -> str:
    """A registry entity's field for `farm registry show`: JSON for structures, words for the rest."""
    if value is None:
        return "-"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
