"""What a gRPC call costs in Python on this box, before the coordinator does anything.

A grpc.aio server whose Heartbeat does nothing (returns an empty reply), called by N clients
over one connection each, from two client processes, at R calls per second in all: the CPU
of the server process and of the clients, and the clients' latency. This is the floor under
bench/coordinator_scale.py's serving process, which answers ~500 calls/s at N = 1,000: what
it spends beyond this floor is the coordinator's own.

    .venv/bin/python bench/grpc_floor.py [--connections 1000] [--rate 600] [--seconds 10] [--server aio|sync]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import socket
import time

import psutil
from _box_speed import reference_loop_ms


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(port: int, kind: str) -> None:
    import grpc

    from foundation.wire import farm_pb2, farm_pb2_grpc

    if kind == "aio":
        class AsyncServicer(farm_pb2_grpc.FarmAgentServicer):
            async def Heartbeat(self, request, context):
                return farm_pb2.HeartbeatResponse()

        async def main() -> None:
            server = grpc.aio.server()
            farm_pb2_grpc.add_FarmAgentServicer_to_server(AsyncServicer(), server)
            server.add_insecure_port(f"127.0.0.1:{port}")
            await server.start()
            await server.wait_for_termination()

        asyncio.run(main())
        return

    from concurrent import futures

    class SyncServicer(farm_pb2_grpc.FarmAgentServicer):
        def Heartbeat(self, request, context):
            return farm_pb2.HeartbeatResponse()

    server = grpc.server(futures.ThreadPoolExecutor(16))
    farm_pb2_grpc.add_FarmAgentServicer_to_server(SyncServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def clients(port: int, connections: int, rate: float, until: float, pipe) -> None:
    """``connections`` callers, each calling every connections/rate seconds until ``until``."""
    import grpc

    from foundation.wire import farm_pb2, farm_pb2_grpc

    async def main() -> list[float]:
        # A local subchannel pool: channels to one address would share a connection otherwise.
        options = [("grpc.use_local_subchannel_pool", 1)]
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) for _ in range(connections)]
        latencies: list[float] = []
        interval = connections / rate

        async def caller(stub) -> None:
            await asyncio.sleep(interval * random.random())
            while time.monotonic() < until:
                begin = time.monotonic()
                await stub.Heartbeat(farm_pb2.HeartbeatRequest(agent_id="a" * 32), timeout=30)
                latencies.append(time.monotonic() - begin)
                await asyncio.sleep(max(0.0, begin + interval - time.monotonic()))

        await asyncio.gather(*(caller(farm_pb2_grpc.FarmAgentStub(c)) for c in channels))
        await asyncio.gather(*(c.close() for c in channels))
        return latencies

    pipe.send(asyncio.run(main()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=600.0, help="calls per second, all clients together")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window, after 5 s of warm-up")
    parser.add_argument("--server", choices=("aio", "sync"), default="aio")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    reference_ms = reference_loop_ms()
    context = multiprocessing.get_context("spawn")
    port = free_port()
    server = context.Process(target=serve, args=(port, args.server), daemon=True)
    server.start()
    time.sleep(2.0)
    until = time.monotonic() + 5.0 + args.seconds + 1.0
    pipes, procs = [], []
    for share in (args.connections // 2, args.connections - args.connections // 2):
        ours, theirs = context.Pipe()
        proc = context.Process(target=clients, args=(port, share, args.rate * share / args.connections, until, theirs),
                               daemon=True)
        proc.start()
        pipes.append(ours)
        procs.append(proc)
    time.sleep(5.0)
    watched = [psutil.Process(server.pid)] + [psutil.Process(p.pid) for p in procs]
    before = [p.cpu_times() for p in watched]
    begin = time.monotonic()
    time.sleep(args.seconds)
    after = [p.cpu_times() for p in watched]
    wall = time.monotonic() - begin
    cpu = [100 * ((a.user + a.system) - (b.user + b.system)) / wall for a, b in zip(after, before)]
    latencies = sorted(x for pipe in pipes for x in pipe.recv())
    server.kill()
    result = {
        "server": args.server, "connections": args.connections, "calls_per_s": args.rate,
        "server_cpu_pct": cpu[0], "clients_cpu_pct": sum(cpu[1:]),
        "server_cpu_us_per_call": 1e6 * cpu[0] / 100 / args.rate,
        "reference_loop_ms": reference_ms,
        "p50_ms": 1000 * latencies[len(latencies) // 2], "p99_ms": 1000 * latencies[int(0.99 * len(latencies))],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"grpc {args.server} server, empty Heartbeat, {args.connections} connections, {args.rate:g} calls/s: "
          f"server {result['server_cpu_pct']:.0f}% of a core ({result['server_cpu_us_per_call']:.0f} us per call), "
          f"clients {result['clients_cpu_pct']:.0f}% together; latency p50 {result['p50_ms']:.1f} ms, "
          f"p99 {result['p99_ms']:.1f} ms; this box's speed: reference loop {reference_ms:.0f} ms (lower is faster)")


if __name__ == "__main__":
    main()
