"""The coordinator's calls in plain values (coordinator.service composes them; no gRPC here).

- ``client``: submit models, look at and cancel jobs, list agents (`ClientCalls`);
- ``agents``: registration and heartbeats (`AgentCalls`);
- ``shards``: shard leases claimed, offered, completed and failed (`ShardCalls`);
- ``reports``: records reported under shard leases (`ReportCalls`);
- ``validations``: validation leases and what agents found (`ValidationCalls`).

What they take and return is in coordinator.values, their errors in coordinator.errors; the
servicer (coordinator.servicer) calls these parts directly. Each part takes what it needs in
its constructor; what several parts share lives in small objects of its own (coordinator.hints,
coordinator.model_cache.ModelCache, coordinator.fleet).
"""
