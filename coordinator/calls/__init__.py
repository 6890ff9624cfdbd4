"""The coordinator's calls in plain values (coordinator.service composes them; no gRPC here).

- ``values``: what clients and agents send and get back, and the calls' errors;
- ``client``: submit models, look at and cancel jobs, list agents (`ClientCalls`);
- ``agents``: registration and heartbeats (`AgentCalls`);
- ``shards``: shard leases claimed, offered, completed and failed (`ShardCalls`);
- ``reports``: records reported under shard leases (`ReportCalls`);
- ``validations``: validation leases and what agents found (`ValidationCalls`).

Each part takes what it needs in its constructor; what several parts share lives in small
objects of its own (coordinator.hints, coordinator.job_work.ModelCache, coordinator.fleet).
"""
