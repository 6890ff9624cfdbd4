"""Strict reading of a stored or sent JSON object: it is an object, and holds no field its reader does not know
(a document of another version says so by name instead of being half read)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def check_object(value: Any, what: str, names: set[str] | None = None) -> None:
    """ValueError unless ``value`` is an object holding no field but ``names`` (None: any)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} {value!r} is not an object")
    unknown = sorted(set(value) - names) if names is not None else []
    if unknown:
        raise ValueError(f"{what} holds {', '.join(unknown)}")
