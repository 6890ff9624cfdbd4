"""Where a coordinator is and what to present to it: its address, and the token and TLS files of this caller."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from farm.client import CoordinatorClient
    from foundation.wire.access import ChannelAccess


@dataclass(frozen=True)
class Coordinator:
    """A coordinator's address (None: none was given, the caller works on the registry) and the
    credentials to present to it; without a token file, FARM_TOKEN's token is presented if set."""

    address: str | None
    token_file: Path | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None

    def access(self) -> "ChannelAccess":
        from foundation.wire.access import ChannelAccess

        return ChannelAccess.from_files(self.token_file, self.tls_ca, self.tls_cert, self.tls_key)

    def client(self) -> "CoordinatorClient":
        from farm.client import CoordinatorClient

        return CoordinatorClient(self.address, access=self.access())
