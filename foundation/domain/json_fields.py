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


def text(value: Any, name: str) -> str:
    """``value``, a string; ValueError naming ``name`` otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"{name} {value!r} is not text")
    return value


def count(value: Any, name: str) -> int:
    """``value``, a whole number of zero or more (not a bool)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} {value!r} is not a count")
    return value


def number(value: Any, name: str) -> float:
    """``value``, an int or float (not a bool), as a float."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{name} {value!r} is not a number")
    return float(value)


def flag(value: Any, name: str) -> bool:
    """``value``, true or false."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} {value!r} is not true or false")
    return value
