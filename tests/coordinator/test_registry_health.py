"""What the coordinator knows of its registry (coordinator.registry_health): the log of an outage,
the flips its health service follows, and a schema that is gone told from a server that is away."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import text

from coordinator.registry_health import SUMMARY_EVERY_S, RegistryHealth, RegistrySchemaLost, check_registry
from foundation.errors import RegistryError
from foundation.registry.session import Changes


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_logs_its_first_failure_a_summary_now_and_then_and_its_end(caplog):
    clock, flips = Clock(), []
    health = RegistryHealth(flips.append, clock)
    started_hearing = health.heard_since
    down = RegistryError("cannot reach the registry at postgresql://db/farm: connection refused\nsecond line",
                         "check that the database server is up")
    caplog.set_level(logging.INFO, logger="farm.coordinator")

    for _ in range(60):  # a tick every half second, for 30 s
        health.failed(down)
        clock.now += SUMMARY_EVERY_S / 60
    # Callers get what is wrong in one line; the operator's log has the fix too, once.
    assert health.error == "cannot reach the registry at postgresql://db/farm: connection refused second line"
    assert flips == [False]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("registry failing: cannot reach") and "check that" in lines[0]

    # While it fails the gate refuses every beat: the tick that finds it back judges nobody.
    assert health.heard_since > started_hearing
    health.failed(down)  # 30 s on: one summary
    assert len(caplog.records) == 2
    assert caplog.records[1].getMessage().startswith("registry still failing after 30 s (61 failed checks)")

    before_return = health.heard_since
    health.answered()
    back = health.heard_since
    health.answered()
    assert flips == [False, True] and health.error is None
    assert before_return <= back == health.heard_since
    assert len(caplog.records) == 3 and "registry answers again after 30 s" in caplog.records[2].getMessage()
    # The coordinator hears agents again from now: silence before it is nobody's.
    assert health.heard_since > started_hearing


def test_a_registry_that_answers_passes_and_one_without_its_schema_is_lost(store):
    check_registry(store)
    with store.unit_of_work.write(Changes.STATE) as session:
        session.execute(text("DROP TABLE alembic_version"))
    with pytest.raises(RegistrySchemaLost, match="lost its schema while the coordinator ran") as lost:
        check_registry(store)
    assert lost.value.exit_code == 4
