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

    def __post_init__(self) -> None:
        """What a Python caller may give: an address as a string, each file as a path or its string
        (BadInput for anything else, as the command line's options are checked)."""
        from farm import arguments
        from foundation.domain import request_limits as limits

        arguments.optional_text("address", self.address, 'farm.Coordinator("coord:50051")', limits.MAX_ID_LENGTH)
        for name in ("token_file", "tls_ca", "tls_cert", "tls_key"):
            given = arguments.optional_text(name, getattr(self, name), f'{name}="/etc/tvm-farm/{name}"',
                                            limits.MAX_TEXT_LENGTH)
            object.__setattr__(self, name, None if given is None else Path(given))

    def access(self) -> "ChannelAccess":
        from foundation.wire.access import ChannelAccess

        return ChannelAccess.from_files(self.token_file, self.tls_ca, self.tls_cert, self.tls_key)

    def client(self) -> "CoordinatorClient":
        from farm.client import CoordinatorClient

        return CoordinatorClient(self.address, access=self.access())
