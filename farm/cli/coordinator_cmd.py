"""`farm coordinator`: run the distributed farm's coordinator until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import typer

from farm.cli.command import FarmTyper
from farm.cli.options import (
    JSON_OPTION,
    LOG_FORMAT_OPTION,
    LOG_LEVEL_OPTION,
    METRICS_LISTEN_OPTION,
    REGISTRY_OPTION,
    env_option,
    finite_number,
)
from farm.cli.output import emit_json, write_error
from foundation.domain import request_limits as limits
from foundation.errors import FarmError
from foundation.logs import LogFormat, LogLevel, configure_logging

app = FarmTyper()


@app.command()
def coordinator(
    listen: str = env_option("127.0.0.1:50051", "--listen", command="coordinator", metavar="HOST:PORT",
                             help="host:port the gRPC API listens on (0.0.0.0:50051 for other boxes)."),
    registry: str | None = REGISTRY_OPTION,
    tracker: str | None = env_option(
        None, "--tracker", command="coordinator", metavar="HOST:PORT",
        help="host:port of a running TVM RPC tracker; without it the coordinator starts its own."),
    tracker_listen: str = env_option(
        "127.0.0.1:9190", "--tracker-listen", command="coordinator", metavar="HOST:PORT",
        help="Where the coordinator's own tracker listens (without --tracker)."),
    # Bounded above as well: these go to agents as durations, and an infinite or huge one failed
    # every registration (INTERNAL) with the coordinator up.
    heartbeat_interval: float = env_option(5.0, "--heartbeat-interval", command="coordinator",
                                           parser=finite_number(0.1, 3600), metavar="SECONDS",
                                           help="Seconds between agent heartbeats (0.1 to 3600)."),
    lease_ttl: float = env_option(30.0, "--lease-ttl", command="coordinator", parser=finite_number(0.5, 86400),
                                  metavar="SECONDS",
                                  help="Seconds of silence after which an agent's leases are re-queued "
                                       "(0.5 to 86400)."),
    max_attempts: int = env_option(3, "--max-attempts", command="coordinator", metavar="N",
                                   help=f"Attempts of a shard before it, and its job, fail "
                                        f"({limits.MAX_ATTEMPTS.describe()})."),
    records_per_report: int = env_option(
        16, "--records-per-report", command="coordinator", metavar="N",
        help=f"The fewest records agents put in one report (more when records come faster, see --report-rate; "
             f"{limits.RECORDS_PER_REPORT.describe()})."),
    report_rate: float = env_option(
        100.0, "--report-rate", command="coordinator", parser=finite_number(0.1, 1e6), metavar="PER_SECOND",
        help="Reports a second the whole fleet is asked to keep to: agents batch more records per report "
             "as the fleet measures faster, so the coordinator's calls do not grow with it (0.1 to 1e6)."),
    report_within: float = env_option(
        10.0, "--report-within", command="coordinator", parser=finite_number(0.1, 3600), metavar="SECONDS",
        help="Seconds an agent may keep a measured record before reporting it (longer in a large fleet; "
             "0.1 to 3600)."),
    report_jitter: float = env_option(
        0.25, "--report-jitter", command="coordinator", parser=finite_number(0.0, 0.9), metavar="FRACTION",
        help="How far the report size told to each agent strays from the fleet's (0.25: up to 25% either "
             "way), so that agents measuring at one rate do not report in step (0 to 0.9)."),
    grace: float = env_option(10.0, "--grace", command="coordinator", parser=finite_number(0, 3600),
                              metavar="SECONDS", help="Seconds in-flight calls get on shutdown (0 to 3600)."),
    ingest_process: bool | None = env_option(
        None, "--ingest-process/--no-ingest-process", command="coordinator",
        help="Read and commit reported records in a process of their own, leaving the serving process "
             "to heartbeats and leases [default: on with PostgreSQL, off with SQLite]."),
    metrics_listen: str | None = METRICS_LISTEN_OPTION,
    token_file: Path | None = typer.Option(
        None, "--token-file", envvar="FARM_TOKEN_FILE", show_envvar=True, metavar="FILE",
        help="File holding the farm's shared token (or set FARM_TOKEN to the token itself)."),
    tls_cert: Path | None = typer.Option(
        None, "--tls-cert", envvar="FARM_TLS_CERT", show_envvar=True, metavar="FILE",
        help="The coordinator's certificate (PEM): serve the API over TLS only; with --tls-key."),
    tls_key: Path | None = typer.Option(
        None, "--tls-key", envvar="FARM_TLS_KEY", show_envvar=True, metavar="FILE",
        help="The key of --tls-cert (PEM)."),
    tls_client_ca: Path | None = env_option(
        None, "--tls-client-ca", command="coordinator", metavar="FILE",
        help="CA (PEM) whose certificates callers must present: mutual TLS."),
    health_listen: str | None = env_option(
        None, "--health-listen", command="coordinator", metavar="HOST:PORT",
        help="Also serve the gRPC health service alone, in plaintext, on this host:port "
             "(for probes that cannot speak TLS)."),
    log_format: LogFormat = LOG_FORMAT_OPTION,
    log_level: LogLevel = LOG_LEVEL_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Serve jobs to agents: shard tuning tasks, merge records, build, validate, commit.

    Beyond loopback the API demands the farm's token (FARM_TOKEN or --token-file) from every
    caller but the health service, and the coordinator will not start without one.
    """
    from coordinator.fleet import ReportPolicy
    from coordinator.server import leave_process, run_until_signalled, serve
    from foundation.wire.access import ServerAccess, open_port_warnings

    # Checked before anything starts: records_per_report goes to agents as a uint32.
    limits.check_number("--max-attempts", max_attempts, limits.MAX_ATTEMPTS)
    limits.check_number("--records-per-report", records_per_report, limits.RECORDS_PER_REPORT)
    if lease_ttl <= heartbeat_interval:
        raise FarmError(f"--lease-ttl {lease_ttl:g} must exceed --heartbeat-interval {heartbeat_interval:g}",
                        "make the TTL a few intervals, e.g. 6x")
    access = ServerAccess.from_files(token_file, tls_cert, tls_key, tls_client_ca)
    configure_logging(log_format, log_level, sys.stderr)
    # The daemon's stderr is its log: every line a record, in the one text layout or JSON.
    log = logging.getLogger("farm.coordinator")
    warnings = open_port_warnings(access.token, tracker=None if tracker else tracker_listen, metrics=metrics_listen)
    for warning in [*warnings, *filter(None, [access.expiry_warning])]:
        log.warning(warning.removeprefix("warning: ").rstrip())
    server = serve(listen, registry, tracker, tracker_listen=tracker_listen,
                   heartbeat_interval=heartbeat_interval, lease_ttl=lease_ttl, max_attempts=max_attempts,
                   report_policy=ReportPolicy(records_per_report, report_rate, report_within, report_jitter),
                   ingest_process=ingest_process, access=access, health_listen=health_listen,
                   metrics_listen=metrics_listen)
    document = {"listen": server.address, "registry": str(server.coordinator.store.url),
                "tracker": server.tracker_address, "owns_tracker": server.tracker is not None,
                "ingest_pid": server.ingest.pid if server.ingest is not None else None,
                "tls": access.tls, "mutual_tls": access.client_ca is not None, "token": access.token is not None,
                "health_listen": f"{health_listen.rsplit(':', 1)[0]}:{server.health_port}" if health_listen else None,
                "metrics": f"http://{server.metrics.address}/metrics" if server.metrics else None}
    def announce() -> None:  # once SIGTERM and Ctrl-C are taken, so that what it says holds at once
        if json_output:
            emit_json(document)
            return
        door = ("TLS" if access.tls else "plaintext") + (", token required" if access.token else ", no token")
        banner = (f"coordinator on {server.address} ({door}), registry {document['registry']}, "
                  f"tracker {document['tracker']}"
                  + (f", metrics {document['metrics']}" if document["metrics"] else "")
                  + "; Ctrl-C or SIGTERM stops it")
        log.info(banner)

    try:
        run_until_signalled(server, grace, announce)
    except FarmError as err:  # it could not go on (its registry's schema is gone): said as main() says errors
        if json_output:
            emit_json(err.to_json())
        write_error(" ".join(str(err).split()))
        leave_process(err.exit_code)
    leave_process(0)  # not through the interpreter's teardown (coordinator.server.leave_process)
