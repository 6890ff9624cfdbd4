"""The registry a command names (its option, else FARM_REGISTRY, else FARM_HOME's), opened for it.

Only commands that create data (`submit`, `coordinator`, `registry import`, `registry init`) open it
with ``create=True``; the others refuse a registry that does not exist rather than make an empty one
where a mistyped path points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from foundation import config
from foundation.errors import BadInput

if TYPE_CHECKING:  # pragma: no cover
    from foundation.registry.store import RegistryStore


def open_store(registry_option: str | None, *, create: bool = False) -> "RegistryStore":
    from foundation.registry.engine import parse_registry_url, sqlite_in_memory
    from foundation.registry.store import RegistryStore

    url = config.registry_url(registry_option)
    if url == config.default_registry_url():  # FARM_HOME's registry: a FARM_HOME it cannot be in is named
        config.checked_data_dir(create=create)
    if sqlite_in_memory(parse_registry_url(url)):
        raise BadInput(f"the registry {url!r} is in memory: it would keep nothing after this command",
                       "give a file, such as sqlite:///path/to/registry.db")
    return RegistryStore(url, create=create)
