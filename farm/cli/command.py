"""The command group every `farm` module declares its commands on: usage lines as POSIX writes them, options in groups.

typer wraps required arguments in braces (`farm submit [OPTIONS] {MODEL} {TARGET} [BATCH]`);
man pages and `--help` of most tools write them bare and only optional ones in brackets.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand


class FarmCommand(TyperCommand):
    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [_bare(piece) for piece in super().collect_usage_pieces(ctx)]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Arguments, the options of no group, then each group (an option's ``rich_help_panel``) under its own
        heading, in the order the command declares them. Rich's panels are off here (farm.cli.app), and
        typer's plain help would put every option in one list."""
        arguments, sections = [], {"Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:
                sections.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        for heading, records in (("Arguments", arguments), *sections.items()):
            if records:
                with formatter.section(heading):
                    formatter.write_dl(records)


def _bare(piece: str) -> str:
    """`{MODEL}` -> `MODEL`, `{PATH}...` -> `PATH...`; anything else as it is."""
    name, dots = (piece[:-3], "...") if piece.endswith("...") else (piece, "")
    if name.startswith("{") and name.endswith("}"):
        return name[1:-1] + dots
    return piece


class FarmTyper(typer.Typer):
    """A typer.Typer whose commands print FarmCommand's usage line."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or FarmCommand, **kwargs)
