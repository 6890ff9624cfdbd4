"""The metrics the farm serves, as the deploy recipes (Grafana dashboard, Prometheus) and the
live scrape tests rely on them: name, type, labels and the label values the contract fixes.
"""

from __future__ import annotations

JOB_STATES = {"queued", "running", "building", "validating", "succeeded", "failed", "cancelled"}

# name -> (type, labels, {label: the values it can take, where the contract fixes them})
METRICS = {
    # coordinator
    "farm_jobs": ("gauge", {"state"}, {"state": JOB_STATES}),
    "farm_shards": ("gauge", {"state"}, {}),
    "farm_lease_expirations_total": ("counter", {"kind"}, {"kind": {"shard", "validation"}}),
    "farm_shard_retries_total": ("counter", set(), {}),
    "farm_records_ingested_total": ("counter", {"fingerprint"}, {}),
    # job_id, not job: Prometheus' own "job" label (the scrape job) would rename it exported_job.
    "farm_job_best_latency_seconds": ("gauge", {"job_id", "model"}, {}),
    "farm_agents": ("gauge", {"fingerprint", "state"}, {}),
    "farm_registry_lookups_total": ("counter", {"result"}, {"result": {"hit", "miss"}}),
    "farm_artifacts_committed_total": ("counter", set(), {}),
    "farm_job_duration_seconds": ("histogram", {"state", "mode"},
                                  {"state": {"succeeded", "failed", "cancelled"}, "mode": {"budget", "until"}}),
    "farm_job_queue_wait_seconds": ("histogram", {"mode"}, {"mode": {"budget", "until"}}),
    "farm_job_last_event_timestamp_seconds": ("gauge", {"job_id", "model", "state"},
                                              {"state": JOB_STATES - {"succeeded", "failed", "cancelled"}}),
    # go-grpc-prometheus's names, labels and types
    "grpc_server_handled_total": ("counter", {"grpc_service", "grpc_method", "grpc_type", "grpc_code"},
                                  {"grpc_type": {"unary", "server_stream", "client_stream", "bidi_stream", "unknown"}}),
    "grpc_server_handling_seconds": ("histogram", {"grpc_service", "grpc_method", "grpc_type"}, {}),
    # both
    "farm_build_info": ("gauge", {"version", "tvm_version", "python_version"}, {}),
    # coordinator (the fleet's, as reported) and agents (their own)
    "farm_warm_start_seeds_total": ("counter", {"source"}, {"source": {"own_fingerprint", "other_fingerprint"}}),
    # agents
    "farm_trials_total": ("counter", {"fingerprint", "target_kind", "outcome"},
                          {"outcome": {"ok", "build_error", "run_error", "timeout"}}),
    "farm_build_duration_seconds": ("histogram", set(), {}),
    "farm_measure_duration_seconds": ("histogram", set(), {}),
    "farm_rpc_server_restarts_total": ("counter", set(), {}),
    "farm_agent_info": ("gauge", {"fingerprint", "device"}, {}),
}

# Labels Prometheus attaches to every scraped series: the target's (job, instance) and the
# static labels of deploy/prometheus/prometheus.yml. A metric's own "job" label clashes with
# the target's and is stored as "exported_job" (honor_labels is off).
TARGET_LABELS = {"job", "instance", "role"}


def series_labels() -> dict[str, set[str]]:
    """Every series name Prometheus will hold for the contract's metrics, with its labels."""
    out = {}
    for name, (kind, labels, _) in METRICS.items():
        stored = {"exported_job" if label == "job" else label for label in labels} | TARGET_LABELS
        if kind == "histogram":
            out[f"{name}_bucket"] = stored | {"le"}
            out[f"{name}_sum"] = stored
            out[f"{name}_count"] = stored
        else:
            out[name] = stored
    return out


SERIES = series_labels()
LABEL_VALUES = {name: values for name, (_, _, values) in METRICS.items() if values}
