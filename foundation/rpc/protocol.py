"""TVM RPC's wire constants, as tvm.rpc.base defines them: the magic numbers a tracker and a server
answer a connection with, and the tracker's message codes.

Here so that talking to a tracker (its summary, a session's request, a server's handshake) does
not import TVM: a coordinator needs TVM for nothing else, and `import tvm` is ~0.8 CPU-seconds and
~100 MB in every coordinator. tests/foundation/test_rpc_protocol.py holds them equal to the
installed TVM's.
"""

from __future__ import annotations

from enum import IntEnum

RPC_MAGIC = 0xFF271  # a server's
RPC_TRACKER_MAGIC = 0x2F271


class TrackerCode(IntEnum):
    FAIL = -1
    SUCCESS = 0
    PING = 1
    STOP = 2
    PUT = 3
    REQUEST = 4
    UPDATE_INFO = 5
    SUMMARY = 6
    GET_PENDING_MATCHKEYS = 7
