"""A TCP forwarder from one network namespace to another, run as a process of its own by
support.sandboxes: what docker-proxy does for a published port, and what makes the box's
PostgreSQL the database host a recipe names.

    python port_forward.py LISTEN_NETNS LISTEN TO_NETNS TO [--pg-database NAME=NAME] [--pg-user NAME=NAME]

LISTEN is HOST:PORT, or unix:PATH for a Unix socket (PostgreSQL's in /run/postgresql, which
pg_isready asks); TO is HOST:PORT. A netns is a path such as /proc/PID/ns/net, or `-` for this
process's own. With --pg-database or --pg-user the first message of each connection is read as
PostgreSQL's: an SSL or GSS encryption request is declined (so the startup message goes in the
clear), and the startup message's database and user are renamed; everything after passes as it
is. It prints `ready` once it listens, and serves until killed.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import socket
import struct
import sys
import threading

CLONE_NEWNET = 0x40000000
SSL_REQUEST, GSSENC_REQUEST, PROTOCOL_3 = 80877103, 80877104, 196608


def enter(netns: str) -> None:
    if netns == "-":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(netns, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")
    finally:
        os.close(fd)


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def listen(where: str) -> socket.socket:
    if where.startswith("unix:"):
        path = where[len("unix:"):]
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        os.chdir(os.path.dirname(path))  # bound by its name: a test's folder is longer than a socket path may be
        server.bind(os.path.basename(path))
        os.chmod(path, 0o777)  # as PostgreSQL's own socket: any local user may connect
    else:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(address(where))
    server.listen(64)
    return server


def receive(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed during the startup message")
        data += chunk
    return data


def postgres_startup(client: socket.socket, databases: dict[str, str], users: dict[str, str]) -> bytes:
    """The client's startup message, its database and user renamed; encryption requests declined."""
    while True:
        length, code = struct.unpack("!II", receive(client, 8))
        if code in (SSL_REQUEST, GSSENC_REQUEST):
            client.sendall(b"N")
            continue
        body = receive(client, length - 8)
        if code != PROTOCOL_3:
            return struct.pack("!II", length, code) + body
        fields = body.rstrip(b"\0").split(b"\0")
        pairs = dict(zip(fields[::2], fields[1::2], strict=True))
        for key, renames in ((b"database", databases), (b"user", users)):
            if key in pairs:
                pairs[key] = renames.get(pairs[key].decode(), pairs[key].decode()).encode()
        body = b"".join(k + b"\0" + v + b"\0" for k, v in pairs.items()) + b"\0"
        return struct.pack("!II", len(body) + 8, code) + body


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for conn in (source, sink):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve_one(client: socket.socket, to: tuple[str, int], databases: dict, users: dict) -> None:
    try:
        first = postgres_startup(client, databases, users) if databases or users else b""
        upstream = socket.create_connection(to, timeout=10)
        upstream.settimeout(None)
        upstream.sendall(first)
    except OSError:
        client.close()
        return
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
    pump(client, upstream)


def renames(pairs: list[str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in pairs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("listen_netns")
    parser.add_argument("listen")
    parser.add_argument("to_netns")
    parser.add_argument("to")
    parser.add_argument("--pg-database", action="append", default=[])
    parser.add_argument("--pg-user", action="append", default=[])
    args = parser.parse_args()
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    enter(args.listen_netns)
    server = listen(args.listen)
    enter(args.to_netns if args.to_netns != "-" else f"/proc/self/fd/{home}")
    databases, users = renames(args.pg_database), renames(args.pg_user)
    print("ready", flush=True)
    while True:
        client, _ = server.accept()
        threading.Thread(target=serve_one, args=(client, address(args.to), databases, users), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
