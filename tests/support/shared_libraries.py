"""A real shared library that TVM did not build: one of this Python's own extension modules."""

from __future__ import annotations

import sys

import pytest


def python_extension_library() -> bytes:
    """The bytes of a C extension module of this interpreter; the test is skipped where it has none."""
    import _json  # noqa: F401  (a C extension, where this interpreter has one)

    path = sys.modules["_json"].__file__
    if path is None or not path.endswith(".so"):
        pytest.skip("this Python has no shared-library extension module to read")
    with open(path, "rb") as f:
        return f.read()
