"""The cost model a shard names: fetched from the coordinator once per sha256, checked, kept.

A shard carries only a reference (CostModelRef: id, sha256, size). The stored model holds every
training sample and grows with every record the fingerprint measures (docs/benchmarks.md,
"Distributed warm starts"), while a model changes only when a job ends: sent with every shard it
would cost every lease, of every agent, that many bytes again. The agent asks for the bytes
(GetCostModel) when it sees a sha256 it does not hold, refuses bytes that do not match it, and
keeps the last few in memory: every later shard of the fingerprint starts at once.
A model that cannot be had is not a failure: the search starts untrained, and the shard's
report says why.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

import grpc

logger = logging.getLogger("farm.agent")

# Models kept: one fingerprint per agent, whose model changes after each job it learns from.
KEPT = 2
FETCH_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class FetchedModel:
    """The bytes of a named model, or None and why not."""

    content: bytes | None
    note: str = ""


def checked(content: bytes, sha256: str) -> FetchedModel:
    """``content`` if it is what ``sha256`` names, else nothing: the bytes are loaded as a model."""
    actual = hashlib.sha256(content).hexdigest()
    if actual != sha256:
        return FetchedModel(None, f"the cost model's bytes have sha256 {actual[:12]}, not the {sha256[:12]} "
                                  "the shard named: refused")
    return FetchedModel(content)


class CostModelCache:
    """Named cost models' bytes by sha256; ``fetched`` counts downloads (each a GetCostModel)."""

    def __init__(self, kept: int = KEPT):
        self._kept = kept
        self._models: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.fetched = 0

    def get(self, stub, agent_id: str, ref) -> FetchedModel:
        """The bytes of the model ``ref`` (a farm_pb2.CostModelRef) names, from memory or the coordinator."""
        from foundation.wire import farm_pb2

        with self._lock:
            kept = self._models.get(ref.sha256)
            if kept is not None:
                self._models.move_to_end(ref.sha256)
                return FetchedModel(kept)
        try:
            reply = stub.GetCostModel(farm_pb2.GetCostModelRequest(agent_id=agent_id, id=ref.id, sha256=ref.sha256),
                                      timeout=FETCH_TIMEOUT_S)
        except grpc.RpcError as err:
            note = f"the coordinator did not send cost model {ref.id}: {err.code().name}: {err.details()}"
            logger.warning("%s; the search starts untrained", note)
            return FetchedModel(None, note)
        self.fetched += 1
        fetched = checked(reply.content, ref.sha256)
        if fetched.content is None:
            logger.warning("%s; the search starts untrained", fetched.note)
            return fetched
        with self._lock:
            self._models[ref.sha256] = fetched.content
            while len(self._models) > self._kept:
                self._models.popitem(last=False)
        return fetched
