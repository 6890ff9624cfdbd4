"""What the listing commands show people: jobs, agents and artifacts as rows of words and human units.

Every view reads the same JSON documents `--json` prints (or the registry's entities), so the
two never disagree; nothing here prints a Python value as Python would (no ``None``, no dicts).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

from farm.cli.units import age
from foundation.domain.jobs import JobState
from foundation.domain.reuse import describe_summary
from foundation.domain.warm_start_use import describe as describe_warm_start
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


def job_row(doc: dict) -> list[Any]:
    """A row of `farm jobs` from a job document (farm.client.job_json)."""
    state = doc["state"] + (" (hit)" if doc.get("cache_hit") else "")
    return [doc["job"], state, doc["model"], doc["batch"], _target_kind(doc["target"], doc.get("target_kind", "")),
            _trials(doc["trials"], doc.get("trials_budget", 0), doc.get("trial_errors", 0)), doc["fingerprint"],
            age(_when(doc.get("created_at"))), doc.get("status", "")]


def registry_job_row(job, model) -> list[Any]:
    """A row of `farm jobs` from a registry Job and its Model (without a coordinator)."""
    state = job.state + (" (hit)" if job.cache_hit else "")
    return [job.id, state, model.name if model else job.model_id[:12], model.batch if model else None,
            _target_kind(job.target, job.target_kind), _trials(job.trials_done, job.trials_budget),
            job.fingerprint_id, age(job.created_at), job.status or job.error]


def job_line(doc: dict) -> str:
    """A job on one line, as `farm status --watch` logs each change: id, state, trials, status."""
    trials = _trials(doc["trials"], doc.get("trials_budget", 0), doc.get("trial_errors", 0))
    return "  ".join(part for part in (doc["job"], doc["state"], f"trials {trials}", doc.get("status") or "") if part)


def jobs_described(states: list[str], model: str | None) -> str:
    """What `farm jobs` looked for, for the line that says it found none: "failed jobs of resnet-18"."""
    return (f"{' or '.join(states)} " if states else "") + "jobs" + (f" of {model}" if model else "")


def job_fields(doc: dict) -> list[tuple[str, Any]]:
    """`farm status`: the job's fields, `kubectl describe` style."""
    shards = ", ".join(f"{count} {state}" for state, count in (doc.get("shards") or {}).items() if count)
    fields = [
        ("Job", doc["job"]),
        ("State", doc["state"] + ("  (answered from the registry)" if doc.get("cache_hit") else "")),
        ("Status", doc.get("status")),
        ("Model", f"{doc['model']}, batch {doc['batch']}"),
        ("Target", doc["target"] or doc.get("target_kind")),
        ("Weights", _weights_text(doc.get("weights_layout"))),
        ("Why", (doc.get("weights_layout_choice") or {}).get("why")),
        ("Fingerprint", doc["fingerprint"] or "not chosen yet: the first agent of its target kind decides"),
        ("Trials", _trials(doc["trials"], doc.get("trials_budget", 0), doc.get("trial_errors", 0))),
        ("Plan", "\n".join(plan_lines(doc["trial_plan"])) if doc.get("trial_plan") else None),
        ("Shards", shards or "none yet"),
        ("Reuse", describe_summary(doc["reuse"]) if doc.get("reuse") else None),
        ("Until", until_text(doc["until"], doc["state"]) if doc.get("until") else None),
        ("Warm start", describe_warm_start(doc["warm_start"]) if doc.get("warm_start") else None),
        ("Created", _ago(doc.get("created_at"))),
        ("Started", _ago(doc.get("started_at"))),
        ("Finished", _ago(doc.get("finished_at"))),
        ("Runner", doc.get("runner")),
        ("Error", doc.get("error")),
    ]
    for failed in doc.get("failed_shards", []):
        reasons = "; ".join(f"attempt {a['attempt']} on {a['agent']}: {a['reason']}" for a in failed["attempts"])
        fields.append((f"Failed {failed['shard']}", f"tasks {', '.join(failed['tasks'])}: {reasons}"))
    artifact = doc.get("artifact")
    if artifact:
        fields.append(("Artifact", f"{artifact['id']}  {size(artifact.get('size'))}  sha256 {artifact['sha256']}"))
        fields.append(("Latency", latency_text(artifact["latency_ms"], artifact.get("untuned_latency_ms"))))
        if artifact.get("speed"):  # the tuned library against the untuned build, timed interleaved
            from foundation.domain.untuned_speed import SpeedCheck

            fields.append(("Against untuned", SpeedCheck.from_json(artifact["speed"]).describe()))
        from foundation.job_driver.built_untuned import describe_built_untuned

        fields.append(("Built untuned", describe_built_untuned(doc.get("built_untuned"))))
    return fields


def until_text(until: dict, state: str) -> str:
    """How tuning in rounds (`--until`) ended, or where it is: a job document's `until`, as
    foundation.domain.rounds_outcome.RoundsOutcome.to_json spells it."""
    rounds = until.get("rounds") or []
    judged = f"{len(rounds)} round{'s' * (len(rounds) != 1)} judged"
    if not until.get("stopped") and state in (JobState.CANCELLED, JobState.FAILED):
        # Ended between rounds (a cancel, a failed shard): no stop condition was reached.
        return f"{state} while tuning in rounds until {until.get('goal')}, after {judged}"
    if until.get("summary"):
        return until["summary"]
    return f"tuning in rounds until {until.get('goal')}: {judged} so far"


def _weights_text(layout: str | None) -> str | None:
    if layout == "prepacked":
        return "prepacked (the library rearranges plain weights once, at load)"
    if layout == "prepacked-nchwc":
        return "prepacked-nchwc (weights rearranged once, at load; activations in blocks of 8 or 16 channels)"
    return layout


def plan_lines(plan: dict) -> list[str]:
    """A trial plan (foundation.domain.trial_plan.TrialPlan.to_json) for people: the sum, then
    each task tuned, largest share first, then the tasks with nothing to tune on one line."""
    tasks = plan.get("tasks", [])
    tuned = sorted((t for t in tasks if not t["minor"]), key=lambda t: -t["share"])
    minor = [t for t in tasks if t["minor"]]
    width = max((len(t["task"]) for t in tuned), default=0)
    in_model = any(t.get("in_model_ms") is not None for t in tasks)
    if in_model:  # after a round of --until: foundation.job_driver.in_model_times
        basis = ("share of what the model loses: its time inside the last round's model less its ceiling "
                 "(the least its work can take here)")
    else:
        basis = "share of the model's latency" + (" (measured where the registry has records)"
                                                  if any(t.get("measured") for t in tasks)
                                                  else " (estimated from FLOPs x calls)")
    phases = plan.get("phases")
    if phases and any(len(t.get("phases", ())) > 1 for t in tasks):  # tuned in two phases: what each gave
        basis = (f"share of what it lost against its ceiling after the first phase ({phases[0]} trials by "
                 f"FLOPs, then {phases[1]} re-planned)")
    elif phases:
        basis += f"; {phases[0]} in a first phase, the {phases[1]} left re-planned from what it measures"
    lines = [f"{plan['planned']} of {plan['budget']} trials over {len(tasks)} tasks, by each task's {basis}"]
    lines += [f"{t['task']:<{width}}  {t['share']:>6.1%}  {t['trials']:>5} trials"
              + (f"  ({t['in_model_ms']:.3f} ms in the model, {t['loss_ms']:.3f} ms above its ceiling)"
                 if t.get("in_model_ms") is not None else "")
              + (f"  ({t['phases'][0]} + {t['phases'][1]}, {t['loss_ms']:.3f} ms above its ceiling)"
                 if len(t.get("phases", ())) > 1 and t.get("loss_ms") is not None else "") for t in tuned]
    if minor:
        lines.append(f"{len(minor)} with nothing to tune: " + ", ".join(f"{t['task']} {t['trials']}" for t in minor))
    return lines


def latency_text(latency_ms: dict, untuned_ms: float | None = None) -> str:
    text = (f"{milliseconds(latency_ms['mean'])} mean, {milliseconds(latency_ms['median'])} median, "
            f"{milliseconds(latency_ms['std'])} std")
    if untuned_ms and latency_ms["mean"]:
        text += f"  (untuned {milliseconds(untuned_ms)}: {speedup_text(untuned_ms, latency_ms['mean'])})"
    return text


def _ago(when: str | None) -> str | None:
    return None if when is None else f"{age(_when(when))} ago"


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
