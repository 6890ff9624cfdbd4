"""Options several commands share, each settable from the environment where a deployment sets it."""

from __future__ import annotations

import typer

JSON_OPTION = typer.Option(False, "--json", help="Print one JSON document on stdout (for scripts); no progress.")
REGISTRY_OPTION = typer.Option(
    None, "--registry", envvar="FARM_REGISTRY", show_envvar=True,
    help="SQLAlchemy URL of the registry (default: SQLite in the farm's data directory).",
)
COORDINATOR_OPTION = typer.Option(
    None, "--coordinator", envvar="FARM_COORDINATOR", show_envvar=True,
    help="host:port of a coordinator; without it commands run embedded on this box.",
)
REQUIRED_COORDINATOR = typer.Option(
    ..., "--coordinator", envvar="FARM_COORDINATOR", show_envvar=True, help="host:port of the coordinator.",
)

# How commands that call a coordinator present themselves (foundation.wire.access).
TOKEN_FILE_OPTION = typer.Option(
    None, "--token-file", envvar="FARM_TOKEN_FILE", show_envvar=True,
    help="File holding the farm's shared token (or set FARM_TOKEN to the token itself).",
)
TLS_CA_OPTION = typer.Option(
    None, "--tls-ca", envvar="FARM_TLS_CA", show_envvar=True,
    help="PEM file of the CA that signed the coordinator's certificate: connect with TLS.",
)
CLIENT_CERT_OPTION = typer.Option(
    None, "--tls-cert", envvar="FARM_TLS_CERT", show_envvar=True,
    help="This caller's certificate (PEM), for a coordinator that demands mutual TLS; with --tls-key.",
)
CLIENT_KEY_OPTION = typer.Option(
    None, "--tls-key", envvar="FARM_TLS_KEY", show_envvar=True, help="The key of --tls-cert (PEM).",
)
METRICS_LISTEN_OPTION = typer.Option(
    None, "--metrics-listen", envvar="FARM_METRICS_LISTEN", show_envvar=True,
    help="host:port to serve Prometheus metrics on, plain HTTP at /metrics (default: none).",
)
