"""An agent tunes, validates and reports without the registry's SQL: everything it learns comes from
its coordinator, so it is spared SQLAlchemy's import (0.2-0.3 CPU-s) with every start."""

from __future__ import annotations

import subprocess
import sys

# What an agent imports to tune a shard, seed it, start from its coordinator's cost model and
# validate a library (agent/shard_tuning.py, its function-level imports included).
AGENT_TUNING_IMPORTS = """
import sys
import agent.daemon, agent.rpc_server, agent.shard_tuning
import foundation.compile, foundation.hardware.fingerprint, foundation.hardware.targets
import foundation.meta_schedule.database.shard_database, foundation.meta_schedule.tuner
import foundation.meta_schedule.warm, foundation.meta_schedule.warm.cost_models
import foundation.meta_schedule.warm.seed_sources, foundation.models.loaded, foundation.runtime.validation
sql = sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic', 'psycopg')
             or m.startswith('foundation.registry'))
print(' '.join(sql) or 'none')
"""


def test_an_agents_tuning_imports_no_sql():
    done = subprocess.run([sys.executable, "-c", AGENT_TUNING_IMPORTS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "none"
