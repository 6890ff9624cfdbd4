"""The cross-hardware cost model in the distributed farm, with real processes: for an agent whose
fingerprint has no records, the coordinator's shard names the cross model; the agent fetches it,
reads it with its own device features, starts its search from it and reports so; after the job
the coordinator retrains it on what the agent measured, a share of what it had learned.

The other fingerprints' records are synthetic (tests/support/cross_records.py); the job is real.
"""

from __future__ import annotations

import json
import re

import pytest

from foundation.registry import RegistryStore

from support.cross_records import BOXES, synthetic_registry
from support.polling import wait_for

pytestmark = pytest.mark.slow

ON_SQLITE = pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)


@ON_SQLITE
def test_an_agent_of_a_new_fingerprint_starts_from_the_cross_model_the_coordinator_names(make_cluster, registry_url):
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    from foundation.meta_schedule.warm.cross_model import NEW_SHARE, refresh_cross_model

    # Few samples (3 boxes x 17), so that the job's records (8 trials of each of mlp-tiny's two
    # tasks) are a share of them the model retrains on.
    store = synthetic_registry(registry_url, tvm.target.Target({"kind": "llvm", "num-cores": 2}), sizes=(32,),
                               per_workload=17)
    try:
        cross = refresh_cross_model(store, tvm.__version__)
    finally:
        store.dispose()
    assert cross is not None

    farm = make_cluster()
    farm.start_coordinator()
    farm.start_agent("a1")
    [agent] = farm.wait_agents(1)
    assert agent["fingerprint_id"] not in {fp for fp, _ in BOXES}

    done = json.loads(farm.farm("submit", "mlp-tiny", "llvm", "2", "--trials-per-task", "8", "--runs", "3",
                                "--weights-layout", "plain", "--json", "--timeout", "400").stdout)
    assert done["state"] == "succeeded", done
    warm = json.loads(farm.farm("status", done["job"], "--json").stdout)["warm_start"]
    assert warm["pretrained_cost_model"] is True and warm["cost_model_kind"] == "xgb-cross", warm
    assert warm["cost_model_sha256"] == cross.sha256, warm
    ranked = re.search(r"it ranked (\d+) batches", warm["cost_model_note"])
    assert ranked and int(ranked.group(1)) >= 1, warm
    assert "cost model cross-hardware" in farm.farm("status", done["job"]).stdout
    assert f"cost model xgb-cross {cross.sha256[:12]}" in farm.log("a1")
    # The coordinator retrains it on the agent's records once the job is done: they are a share of its samples.
    wait_for(lambda: "cross-hardware cost model of cpu" in farm.log("coordinator"), 120,
             "the coordinator to retrain the cross model")
    store = RegistryStore(registry_url, create=False)
    try:
        [after] = store.cost_models.of_kind(tvm.__version__, "xgb-cross")
        assert after.samples - cross.samples >= NEW_SHARE * cross.samples, (after, cross)
        assert after.sha256 != cross.sha256 and after.last_record_id > cross.last_record_id
    finally:
        store.dispose()
