"""TVM's RPC tracker and RPC server, each in one process:

    python -m foundation.rpc.single_process tracker --host H --port P --port-end E
    python -m foundation.rpc.single_process server --host H --port P --port-end E --tracker H:P --key K
                                                   [--custom-addr A]

`python -m tvm.exec.rpc_tracker` and `tvm.exec.rpc_server` import TVM, then start a PopenWorker,
a second Python process that imports TVM again (~0.85 CPU-seconds and ~100 MB each on a 2-core
Zen 4), only to run the listen thread. The thread is TVM's own (tvm.rpc.tracker's and
tvm.rpc.server's PopenTrackerServerState and PopenRPCServerState, what those PopenWorkers run):
here it runs in the process that was started, and a server's session children are forked from
it. The protocol, the tracker's list and the sessions are TVM's, unchanged.

A port that cannot be bound ends the process with the error TVM raises, as its last output line
("ValueError: cannot bind to any port in [P, E)"), which foundation.rpc.tracker reads; a server
whose listen loop failed ends with exit code 1.
"""

from __future__ import annotations

import argparse
import logging
import sys

from foundation.processes.heap import freeze_long_lived, tune_collector


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m foundation.rpc.single_process")
    roles = parser.add_subparsers(dest="role", required=True)
    for role in ("tracker", "server"):
        sub = roles.add_parser(role)
        sub.add_argument("--host", required=True)
        sub.add_argument("--port", type=int, required=True)
        sub.add_argument("--port-end", type=int, required=True, help="exclusive, as TVM's")
        if role == "server":
            sub.add_argument("--tracker", required=True, help="host:port")
            sub.add_argument("--key", required=True)
            sub.add_argument("--custom-addr")
    return parser.parse_args(argv)


def _log_to_this_stderr(tvm_module) -> None:
    """TVM's tracker and server modules give their logger a console handler as they are imported.
    Run in a fork of a process that had imported them (a zygote: foundation.processes.group_guard),
    that handler is gone with the parent's handlers, or writes to the parent's stderr object: the
    logger is given it back, on this process's stderr."""
    handler = getattr(tvm_module, "console_handler", None)
    logger = getattr(tvm_module, "logger", None)
    if isinstance(handler, logging.StreamHandler) and isinstance(logger, logging.Logger):
        handler.setStream(sys.stderr)
        if handler not in logger.handlers:
            logger.addHandler(handler)


def main(argv: list[str] | None = None) -> int:
    tune_collector()  # TVM's import makes ~200,000 objects: the farm's collector, not Python's
    args = _arguments(argv)
    logging.basicConfig(level=logging.INFO)  # as TVM's own entry points: "bind to ...", sessions
    try:
        if args.role == "tracker":
            from tvm.rpc import tracker as tvm_module
            from tvm.rpc.tracker import PopenTrackerServerState

            _log_to_this_stderr(tvm_module)
            state = PopenTrackerServerState(args.host, args.port, args.port_end)
        else:
            from tvm.rpc import server as tvm_module
            from tvm.rpc.server import PopenRPCServerState

            from foundation.hardware.cache_state import register_preprocs

            _log_to_this_stderr(tvm_module)
            register_preprocs()  # the timing contexts' flushes, in every session forked from here

            host, _, port = args.tracker.rpartition(":")
            state = PopenRPCServerState(args.host, args.port, args.port_end, tracker_addr=(host, int(port)),
                                        key=args.key, custom_addr=args.custom_addr)
    except (OSError, ValueError) as err:
        print(f"{type(err).__name__}: {err}", file=sys.stderr, flush=True)
        return 1
    freeze_long_lived()  # before a server forks its sessions: they inherit the heap without walking it
    state.thread.join()
    if args.role == "tracker":
        return 0  # a STOP message ended it
    # A server's loop ends only when it fails: when a session's child dies, TVM raises in the loop's
    # thread. Under a PopenWorker the process lived on, serving nothing; ended, it is restarted at once
    # by whoever supervises it (agent.rpc_server).
    print("the RPC server's listen loop ended (a session's process failed)", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
