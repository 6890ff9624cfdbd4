"""`farm agent`: run this box as one of the farm's agents until SIGTERM or Ctrl-C."""

from __future__ import annotations

from farm.cli.command import FarmTyper
from farm.cli.coordinator_options import coordinator_options
from farm.cli.options import LOG_FORMAT_OPTION, LOG_LEVEL_OPTION, METRICS_LISTEN_OPTION, env_option, finite_number
from farm.connection import Coordinator
from foundation.logs import LogFormat, LogLevel

app = FarmTyper()


@app.command()
@coordinator_options(required=True)
def agent(
    coordinator: Coordinator = None,
    target: list[str] = env_option(["llvm"], "--target", command="agent", metavar="KIND",
                                   help="Target kinds this box tunes and measures (repeat; in the variable, "
                                        "separated by spaces)."),
    device: str = env_option("cpu", "--device", command="agent", metavar="DEVICE",
                             help="cpu, or cuda:N for a GPU agent."),
    build_workers: int | None = env_option(None, "--build-workers", command="agent", min=1, metavar="N",
                                           help="Builder processes (default: all CPUs)."),
    rpc_host: str = env_option("127.0.0.1", "--rpc-host", command="agent", metavar="HOST",
                               help="Address this box's TVM RPC server listens on (reachable by the tracker)."),
    rpc_port: int = env_option(0, "--rpc-port", command="agent", min=0, max=65535, metavar="PORT",
                               help="0: pick a free port."),
    allow_insecure_rpc: bool = env_option(
        False, "--allow-insecure-rpc", command="agent",
        help="Let the TVM RPC server listen beyond loopback on a farm without a token. It runs any code sent "
             "to it and authenticates nobody: fence its port to the farm's boxes."),
    metrics_listen: str | None = METRICS_LISTEN_OPTION,
    grace: float = env_option(15.0, "--grace", command="agent", parser=finite_number(0, 3600), metavar="SECONDS",
                              help="Seconds work under way gets to end after SIGTERM/Ctrl-C; then the agent "
                                   "leaves without it and the shard's lease lapses (0 to 3600)."),
    log_format: LogFormat = LOG_FORMAT_OPTION,
    log_level: LogLevel = LOG_LEVEL_OPTION,
) -> None:
    """Run this box as a farm agent until interrupted (SIGTERM/SIGINT)."""
    import logging
    import os
    import signal
    import threading

    from agent.daemon import Agent, AgentSettings
    from foundation.domain.request_limits import BUILD_WORKERS, check_number
    from foundation.logs import configure_logging
    from foundation.processes.native_stderr import terminal_stderr

    # Checked before anything starts: the builder count goes to the coordinator as a uint32 (a
    # larger one was a ValueError, exit 70), and `cuda:x` was an int() of 'x'.
    check_number("--build-workers", build_workers, BUILD_WORKERS)
    kind, index = _device(device)
    kinds = tuple(dict.fromkeys(target))
    if kind == "cuda" and "cuda" not in kinds:
        kinds = ("cuda", *[k for k in kinds if k != "llvm"])
    access = coordinator.access()
    from foundation.wire.access import open_port_warnings

    # On a copy of stderr: while a shard tunes, stderr itself carries TVM's C++ warnings into the
    # shard's log file (foundation.processes.native_stderr), and the agent's log must go on.
    configure_logging(log_format, log_level, terminal_stderr())
    # The daemon's stderr is its log: every line a record, in the one text layout or JSON.
    rpc_warning = _insecure_rpc_warning(rpc_host, rpc_port, access.token, allow_insecure_rpc)
    from agent.rpc_server import check_rpc_address

    check_rpc_address(rpc_host, rpc_port)
    for warning in [*open_port_warnings(access.token, metrics=metrics_listen), *filter(None, [rpc_warning])]:
        logging.getLogger("farm.agent").warning(warning.removeprefix("warning: ").rstrip())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    settings = AgentSettings(coordinator=coordinator.address, target_kinds=kinds, device=index,
                             build_workers=build_workers, rpc_host=rpc_host, rpc_port=rpc_port, access=access,
                             stop_grace_sec=grace)  # reads FARM_MIN_REPEAT_MS: a bad one stops it here
    # Forked now, while this process has no thread but this one: the agent's channel starts gRPC's.
    from foundation.meta_schedule.forked_workers import fork_zygote_here

    for target_kind in kinds:
        fork_zygote_here(target_kind)
    agent = Agent(settings)
    metrics = None
    if metrics_listen:
        from agent.metrics import serve_metrics

        metrics = serve_metrics(metrics_listen, agent, device)
        logging.getLogger("farm.agent").info("metrics on http://%s/metrics", metrics.address)
    try:
        abandoned = agent.run(stop)  # a refused registration (a wrong token, say) ends it with a FarmError
    finally:
        if metrics is not None:
            metrics.stop()
    if abandoned:  # threads of the work left behind would hold up an ordinary exit
        logging.shutdown()
        os._exit(0)


def _insecure_rpc_warning(host: str, port: int, token: str | None, allowed: bool) -> str | None:
    """Refuse a TVM RPC server beyond loopback on a farm without a token, unless ``allowed``;
    then, the warning to log. TVM's RPC server runs whatever code is sent to it and checks no
    secret (its tracker key is a label): the farm's token cannot guard it either, but a farm
    with one was set up for a network, where the deploy recipes fence the RPC port. A farm
    without one is a box's own, and its RPC server stays on loopback unless asked."""
    from foundation.errors import BadInput
    from foundation.wire.access import is_loopback

    if token is not None or is_loopback(f"[{host}]:{port}" if ":" in host else f"{host}:{port}"):
        return None
    where = host or "every address"
    if not allowed:
        raise BadInput(f"the TVM RPC server would listen on {where}, beyond loopback, on a farm without a token: "
                       "anyone who reaches its port could run any code on this box",
                       "give the farm a token (FARM_TOKEN or --token-file, the coordinator's) and fence the port to "
                       "the farm's boxes, or --rpc-host 127.0.0.1; --allow-insecure-rpc "
                       "(FARM_AGENT_ALLOW_INSECURE_RPC=1) starts it anyway")
    return (f"warning: INSECURE: the TVM RPC server listens on {where}, beyond loopback, on a farm without a token "
            "(--allow-insecure-rpc): anyone who reaches its port can run any code on this box as this user; "
            "fence the port to the farm's boxes")


def _device(text: str) -> tuple[str, int]:
    """--device as (kind, index): cpu, cuda (the first GPU) or cuda:N."""
    import re

    from foundation.errors import BadInput

    match = re.fullmatch(r"(cpu|cuda)(?::(\d{1,4}))?", text.strip().lower())
    if match is None or (match[1] == "cpu" and match[2] is not None):
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise BadInput(f"--device {shown!r} is neither cpu nor cuda:N",
                       "give --device cpu, or cuda:0 for the first GPU")
    return match[1], int(match[2] or 0)
