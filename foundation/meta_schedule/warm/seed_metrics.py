"""`farm_warm_start_seeds_total{source}`: seeds measured in this process, by where they came from.

Counted where seeds are applied (`seed_round.SeedRound`), in whichever process tunes: the
embedded `farm submit` (which serves no metrics; the Python API's host may) and every agent,
whose /metrics serves it. The coordinator serves its own counter of the same name, summing
what its agents report, so one scrape of it sees the fleet's.
"""

from __future__ import annotations

from prometheus_client import Counter

# No registry of its own: the process that serves metrics registers it (agent.metrics).
SEEDS_MEASURED = Counter("farm_warm_start_seeds", "Seeds measured first in a search, by where they came from "
                         "(own_fingerprint, other_fingerprint).", ["source"], registry=None)
