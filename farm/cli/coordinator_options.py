"""The options a command reaches a coordinator with, declared once: its address, and the token and TLS files to present.

A command asks for them with one parameter, ``coordinator: Coordinator``, under
``@coordinator_options()``; the decorator puts the five options (`--coordinator`,
`--token-file`, `--tls-ca`, `--tls-cert`, `--tls-key`, each with its FARM_* variable) where that
parameter stands, and hands the command the values as one farm.connection.Coordinator. (The
placeholder default, ``coordinator: Coordinator = None``, is never seen: typer sees the options.)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from farm.connection import Coordinator

PARAMETER = "coordinator"


def _options(required: bool, panel: str | None) -> dict[str, tuple[Any, Any]]:
    """The five options, by the parameter names the decorated function receives them under."""
    address = typer.Option(
        ... if required else None, "--coordinator", envvar="FARM_COORDINATOR", show_envvar=True,
        metavar="HOST:PORT", rich_help_panel=panel,
        help="host:port of the coordinator." if required
        else "host:port of a coordinator; without it commands run embedded on this box.",
    )
    return {
        "address": (str if required else str | None, address),
        "token_file": (Path | None, typer.Option(
            None, "--token-file", envvar="FARM_TOKEN_FILE", show_envvar=True, metavar="FILE", rich_help_panel=panel,
            help="File holding the farm's shared token (or set FARM_TOKEN to the token itself).")),
        "tls_ca": (Path | None, typer.Option(
            None, "--tls-ca", envvar="FARM_TLS_CA", show_envvar=True, metavar="FILE", rich_help_panel=panel,
            help="PEM file of the CA that signed the coordinator's certificate: connect with TLS.")),
        "tls_cert": (Path | None, typer.Option(
            None, "--tls-cert", envvar="FARM_TLS_CERT", show_envvar=True, metavar="FILE", rich_help_panel=panel,
            help="This caller's certificate (PEM), for a coordinator that demands mutual TLS; with --tls-key.")),
        "tls_key": (Path | None, typer.Option(
            None, "--tls-key", envvar="FARM_TLS_KEY", show_envvar=True, metavar="FILE", rich_help_panel=panel,
            help="The key of --tls-cert (PEM).")),
    }


def coordinator_options(required: bool = False, panel: str | None = None) -> Callable[[Callable[..., Any]],
                                                                                    Callable[..., Any]]:
    """Give the decorated command the coordinator options in place of its ``coordinator`` parameter.

    ``required``: the command works only through a coordinator (`farm agent`, `farm agents`);
    otherwise the address may be left out (Coordinator.address is then None). ``panel``: the
    heading `--help` lists them under (farm.cli.command), for a command whose other options differ
    with and without a coordinator.
    """
    options = _options(required, panel)
    # Prefixed so that they cannot collide with the command's own parameters.
    names = {f"_coordinator_{name}": name for name in options}

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        if PARAMETER not in signature.parameters:
            raise TypeError(f"{command.__name__} has no `{PARAMETER}` parameter to put the options in")
        parameters = []
        for parameter in signature.parameters.values():
            if parameter.name != PARAMETER:
                parameters.append(parameter)
                continue
            parameters += [inspect.Parameter(prefixed, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                             default=options[name][1], annotation=options[name][0])
                           for prefixed, name in names.items()]

        @functools.wraps(command)
        def with_coordinator(**given: Any) -> Any:
            values = {name: given.pop(prefixed) for prefixed, name in names.items()}
            return command(**given, **{PARAMETER: Coordinator(**values)})

        with_coordinator.__signature__ = signature.replace(parameters=parameters)
        # typer reads the annotations too: the command's own, resolved, and the options'.
        with_coordinator.__annotations__ = {
            **{p.name: p.annotation for p in parameters},
            **({"return": signature.return_annotation}
               if signature.return_annotation is not inspect.Signature.empty else {}),
        }
        del with_coordinator.__wrapped__  # typer must see this signature, not the command's
        return with_coordinator

    return decorate
