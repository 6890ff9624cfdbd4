"""The farm's copy of TVM RPC's wire constants is the installed TVM's."""

from __future__ import annotations

from foundation.rpc import protocol


def test_the_magic_numbers_and_tracker_codes_are_tvms():
    from tvm.rpc import base

    assert (protocol.RPC_MAGIC, protocol.RPC_TRACKER_MAGIC) == (base.RPC_MAGIC, base.RPC_TRACKER_MAGIC)
    theirs = {name: value for name, value in vars(base.TrackerCode).items() if isinstance(value, int)}
    assert {code.name: code.value for code in protocol.TrackerCode} == theirs
