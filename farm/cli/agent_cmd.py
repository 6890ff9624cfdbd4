"""`farm agent`: run this box as one of the farm's agents until SIGTERM or Ctrl-C."""

from __future__ import annotations

from pathlib import Path

import typer

from farm.cli.options import (
    CLIENT_CERT_OPTION,
    CLIENT_KEY_OPTION,
    METRICS_LISTEN_OPTION,
    REQUIRED_COORDINATOR,
    TLS_CA_OPTION,
    TOKEN_FILE_OPTION,
)

app = typer.Typer()


@app.command()
def agent(
    coordinator: str = REQUIRED_COORDINATOR,
    target: list[str] = typer.Option(["llvm"], "--target", help="Target kinds this box tunes and measures (repeat)."),
    device: str = typer.Option("cpu", "--device", envvar="FARM_DEVICE", help="cpu, or cuda:N for a GPU agent."),
    build_workers: int | None = typer.Option(None, "--build-workers", min=1, envvar="FARM_BUILD_WORKERS",
                                                help="Builder processes (default: all CPUs)."),
    rpc_host: str = typer.Option("127.0.0.1", "--rpc-host", envvar="FARM_RPC_HOST",
                                 help="Address this box's TVM RPC server listens on (reachable by the tracker)."),
    rpc_port: int = typer.Option(0, "--rpc-port", envvar="FARM_RPC_PORT", help="0: pick a free port."),
    metrics_listen: str | None = METRICS_LISTEN_OPTION,
    grace: float = typer.Option(15.0, "--grace", min=0, envvar="FARM_AGENT_GRACE",
                                help="Seconds work under way gets to end after SIGTERM/Ctrl-C; then the agent "
                                     "leaves without it and the shard's lease lapses."),
    token_file: Path | None = TOKEN_FILE_OPTION,
    tls_ca: Path | None = TLS_CA_OPTION,
    tls_cert: Path | None = CLIENT_CERT_OPTION,
    tls_key: Path | None = CLIENT_KEY_OPTION,
) -> None:
    """Run this box as a farm agent until interrupted (SIGTERM/SIGINT)."""
    import logging
    import os
    import signal
    import threading

    from agent.daemon import Agent, AgentSettings
    from foundation.processes.native_stderr import terminal_stderr
    from foundation.wire.access import ChannelAccess

    kinds = tuple(dict.fromkeys(target))
    if device.startswith("cuda") and "cuda" not in kinds:
        kinds = ("cuda", *[k for k in kinds if k != "llvm"])
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    access = ChannelAccess.from_files(token_file, tls_ca, tls_cert, tls_key)
    # On a copy of stderr: while a shard tunes, stderr itself carries TVM's C++ warnings into the
    # shard's log file (foundation.processes.native_stderr), and the agent's log must go on.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=terminal_stderr())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    settings = AgentSettings(coordinator=coordinator, target_kinds=kinds, device=index,
                             build_workers=build_workers, rpc_host=rpc_host, rpc_port=rpc_port, access=access,
                             stop_grace_sec=grace)
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
