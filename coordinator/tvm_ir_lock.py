"""The coordinator's threads share the foundation's TVM IR lock (foundation.tvm_ir_lock)."""

from __future__ import annotations

from foundation.tvm_ir_lock import TVM_IR_LOCK

__all__ = ["TVM_IR_LOCK"]
