"""Options several commands share, and the rule that names every option's environment variable.

Every option a command takes can also be set from the environment, and `--help` names the
variable. Options several commands share have one name everywhere (`FARM_REGISTRY`,
`FARM_COORDINATOR`, `FARM_TOKEN_FILE`, `FARM_JSON` ...); the rest are `FARM_<COMMAND>_<FLAG>`
(`farm submit --trials`: `FARM_SUBMIT_TRIALS`; `farm registry import --target`:
`FARM_REGISTRY_TARGET`), without exception. The names some options had before the rule
(`DEPRECATED_ENVVARS`) still work, each with a warning that names its new one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, MutableMapping
from typing import Any

import typer

# The names options had before FARM_<COMMAND>_<FLAG>: deployments set them, so they still work
# (read_deprecated_envvars), each with a warning that names the new one.
DEPRECATED_ENVVARS = {
    ("coordinator", "--listen"): "FARM_LISTEN",
    ("coordinator", "--tracker"): "FARM_TRACKER",
    ("coordinator", "--tracker-listen"): "FARM_TRACKER_LISTEN",
    ("coordinator", "--ingest-process"): "FARM_INGEST_PROCESS",
    ("coordinator", "--health-listen"): "FARM_HEALTH_LISTEN",
    ("coordinator", "--tls-client-ca"): "FARM_TLS_CLIENT_CA",
    ("agent", "--device"): "FARM_DEVICE",
    ("agent", "--build-workers"): "FARM_BUILD_WORKERS",
    ("agent", "--rpc-host"): "FARM_RPC_HOST",
    ("agent", "--rpc-port"): "FARM_RPC_PORT",
    ("submit", "--weights-layout"): "FARM_WEIGHTS_LAYOUT",
}


def read_deprecated_envvars(environ: MutableMapping[str, str], warn: Callable[[str], None]) -> None:
    """Each old name set in ``environ`` becomes its option's variable by the rule, unless that is
    set too (the new name wins); ``warn`` gets one line per old name. The old name is taken out,
    so the processes this one starts see only the new one, and say nothing."""
    for (command, flag), old in DEPRECATED_ENVVARS.items():
        if old not in environ:
            continue
        new = envvar_name(command, flag)
        value = environ.pop(old)
        if new in environ:
            warn(f"warning: {old} is deprecated and ignored, {new} is set (unset {old})")
            continue
        environ[new] = value
        warn(f"warning: {old} is deprecated: set {new} instead (`farm {command} {flag}`)")


def envvar_name(command: str, flag: str) -> str:
    """The variable of ``flag`` (`--trials`) of ``command`` (`submit`, `registry`) by the rule."""
    return "FARM_" + "_".join(part.upper().replace("-", "_") for part in (command, flag.lstrip("-")))


def env_option(default: Any, flag: str, *short: str, command: str, **settings: Any) -> Any:
    """A typer option of ``command`` settable from its environment variable, named in `--help`.

    ``flag`` is the option's long name, or `--on/--off` for a boolean pair (the variable takes
    1/0, true/false, yes/no); ``short``, its other names (`-o`).
    """
    first = flag.split("/", 1)[0]
    return typer.Option(default, flag, *short, envvar=envvar_name(command, first), show_envvar=True, **settings)


def finite_number(low: float, high: float | None = None) -> Callable[[str], float]:
    """The parser of a float option (typer's ``parser=``, in place of ``min``/``max``): a finite
    number from ``low`` to ``high``. typer's own range check called NaN "should be <= 3600", and
    let infinity through where there is no upper bound; say both what they are."""
    span = f"from {low:g} to {high:g}" if high is not None else f"at least {low:g}"

    def parse(text: str | float) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not a number; give one {span}") from None
        if not math.isfinite(value):
            raise typer.BadParameter(f"must be a finite number, got {text}; give one {span}")
        if value < low or (high is not None and value > high):
            raise typer.BadParameter(f"must be {span}, got {value:g}")
        return value

    return parse


# The job a command is about (`farm status`, `cancel`, `wait`).
JOB_ARG = typer.Argument(..., metavar="JOB", help="The job id (job-…).")

JSON_OPTION = typer.Option(
    False, "--json", envvar="FARM_JSON", show_envvar=True,
    help="Print one JSON document on stdout (for scripts); no progress.",
)
REGISTRY_OPTION = typer.Option(
    None, "--registry", envvar="FARM_REGISTRY", show_envvar=True, metavar="URL",
    help="SQLAlchemy URL of the registry (default: SQLite in the farm's data directory); "
         "or FARM_REGISTRY_FILE, a file holding it (for a URL with a password).",
)
METRICS_LISTEN_OPTION = typer.Option(
    None, "--metrics-listen", envvar="FARM_METRICS_LISTEN", show_envvar=True, metavar="HOST:PORT",
    help="host:port to serve Prometheus metrics on, plain HTTP at /metrics (default: none).",
)

# How the two daemons log (foundation.logs).
LOG_FORMAT_OPTION = typer.Option(
    "text", "--log-format", envvar="FARM_LOG_FORMAT", show_envvar=True, case_sensitive=False,
    help="text: one line per record for people; json: one JSON object per line for a log pipeline "
         "(time, level, logger, message, and the job, shard and agent ids where there is one).",
)
LOG_LEVEL_OPTION = typer.Option(
    "info", "--log-level", envvar="FARM_LOG_LEVEL", show_envvar=True, case_sensitive=False,
    help="The least severe records written. Libraries' records (alembic, grpc, urllib3 ...) are "
         "written from warning up whatever this says.",
)
