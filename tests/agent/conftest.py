"""Fixtures of the agent's RPC tests."""

from __future__ import annotations

import pytest

from foundation.rpc.tracker import TrackerProcess


@pytest.fixture
def tracker(leaves_no_process):
    """A real TVM RPC tracker on loopback, this test's own; the test leaves no process behind."""
    with TrackerProcess(host="127.0.0.1", port=0) as tracker:
        yield tracker
