"""Linux namespaces standing in for the recipes' containers and hosts, so that the recipes' own
commands run as written: each sandbox has a network of its own (an address on a shared bridge,
names resolved by an /etc/hosts listing every sandbox, as Compose's DNS does), its own host name,
and its own mounts (a fresh /run and /tmp; /etc, /opt and /var as overlays of the box's, so
that a recipe's path such as /opt/tvm-farm/.venv or /etc/tvm-farm can be bound to a folder of
the test without touching the box); its commands run as the recipe's user (setpriv), in its
namespaces (nsenter), as `docker exec` would. A published port, or the box's PostgreSQL as the
recipe's database host, is a support/port_forward.py process between two namespaces.

Needs root, util-linux (unshare, nsenter, setpriv), iproute2, and a kernel with network,
mount and UTS namespaces, bridges, veth and overlayfs: `unavailable()` says what is missing.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("unshare", "nsenter", "setpriv", "ip", "mount")
FORWARDER = Path(__file__).with_name("port_forward.py")
SUBNET = "10.89.0"
# Overlaid rather than replaced: what the box has there stays visible, and a recipe's path under
# them (a mount point) can be made without writing to the box's own folders.
OVERLAID = ("/etc", "/opt", "/var")
# The box's /tmp, where the test's folders are, stays visible here once the sandbox has its own
# /tmp: the source of a later bind mount must be in the sandbox's mount namespace.
BOX_TMP = "/var/.box-tmp"


def unavailable() -> str | None:
    """Why sandboxes cannot be made here, or None."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (util-linux, iproute2)"
    if os.geteuid() != 0:
        return "needs root (network, mount and UTS namespaces, bridges)"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlayfs"
    probe = subprocess.run([shutil.which("unshare"), "--net", "--mount", "--uts", "--", "ip", "link", "add", "b0",
                            "type", "bridge"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot make namespaces and bridges here: {probe.stderr.strip()}"
    return None


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed"
    return path


def _holder(*namespaces: str) -> subprocess.Popen:
    """A sleeping process in new namespaces, which hold them for as long as it lives (as a pod's
    pause container does); waited for until it is in them."""
    mine = {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in ("net", "mnt", "uts")}
    flags = {"net": "--net", "mnt": "--mount", "uts": "--uts"}
    extra = ["--propagation", "private"] if "mnt" in namespaces else []
    proc = subprocess.Popen([tool("unshare"), *(flags[n] for n in namespaces), *extra, "--", "sleep", "infinity"],
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while any(_readlink(f"/proc/{proc.pid}/ns/{ns}") in (mine[ns], None) for ns in namespaces):
        assert proc.poll() is None, f"unshare {namespaces} failed: exit {proc.returncode}"
        assert time.monotonic() < deadline, "unshare never entered its namespaces"
        time.sleep(0.01)
    return proc


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


class Network:
    """A bridge in a namespace of its own (nothing is added to the box's network), with the
    gateway address SUBNET.1, and the /etc/hosts of the sandboxes attached to it."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.hosts_file = root / "hosts"
        self.names: dict[str, list[str]] = {}
        self.holder = _holder("net")
        self.netns = f"/proc/{self.holder.pid}/ns/net"
        self._next = 2
        for args in (["link", "set", "lo", "up"], ["link", "add", "br0", "type", "bridge"],
                     ["addr", "add", f"{SUBNET}.1/24", "dev", "br0"], ["link", "set", "br0", "up"]):
            self.ip(*args)
        self._write_hosts()

    def ip(self, *args: str) -> None:
        subprocess.run([tool("nsenter"), f"--net={self.netns}", tool("ip"), *args], check=True, timeout=30,
                       capture_output=True)

    def attach(self, pid: int, names: list[str]) -> str:
        """Give the network namespace of ``pid`` an address on the bridge, its default route
        through the gateway, and ``names`` in every sandbox's /etc/hosts."""
        address = f"{SUBNET}.{self._next}"
        veth = f"veth{self._next}"
        self._next += 1
        self.ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(pid))
        self.ip("link", "set", veth, "master", "br0", "up")
        inside = [tool("nsenter"), "-t", str(pid), "--net", tool("ip")]
        for args in (["link", "set", "lo", "up"], ["addr", "add", f"{address}/24", "dev", "eth0"],
                     ["link", "set", "eth0", "up"], ["route", "add", "default", "via", f"{SUBNET}.1"]):
            subprocess.run([*inside, *args], check=True, timeout=30, capture_output=True)
        self.names[address] = names
        self._write_hosts()
        return address

    def _write_hosts(self) -> None:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{address}\t{' '.join(names)}" for address, names in self.names.items()]
        # In place: the sandboxes' /etc/hosts is this file, bound.
        with self.hosts_file.open("w") as out:
            out.write("\n".join(lines) + "\n")

    def close(self) -> None:
        _end(self.holder)


@dataclass
class User:
    uid: int
    gid: int
    name: str


ROOT_USER = User(0, 0, "root")


@dataclass
class Sandbox:
    """A container or host: network, UTS and mount namespaces held by a sleeping process."""

    name: str
    root: Path
    network: Network
    hostname: str
    names: list[str]
    # False: the box's own files (a host whose network alone is its own).
    own_mounts: bool = True
    holder: subprocess.Popen = field(init=False)
    address: str = field(init=False)
    forwarders: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self):
        self.root.mkdir(parents=True, exist_ok=True)
        self.holder = _holder("net", "mnt", "uts") if self.own_mounts else _holder("net", "uts")
        self.address = self.network.attach(self.holder.pid, self.names)
        subprocess.run([tool("nsenter"), "-t", str(self.holder.pid), "--uts", "hostname", self.hostname],
                       check=True, timeout=30)
        if not self.own_mounts:
            return
        lines = []
        for top in OVERLAID:
            name = top.strip("/")
            for part in ("upper", "work"):
                (self.root / "overlay" / name / part).mkdir(parents=True, exist_ok=True)
            lines.append(f"mount -t overlay overlay -o lowerdir={top},upperdir={self.root}/overlay/{name}/upper,"
                         f"workdir={self.root}/overlay/{name}/work {top}")
        lines += [f"mkdir -p {BOX_TMP}", f"mount --bind /tmp {BOX_TMP}",
                  f"mount --bind {self.network.hosts_file} /etc/hosts"]
        for own in ("run", "tmp"):
            (self.root / own).mkdir(exist_ok=True)
            (self.root / own).chmod(0o1777 if own == "tmp" else 0o755)
            lines.append(f"mount --bind {self.root / own} /{own}")
        self.mount_script(lines)

    @property
    def pid(self) -> int:
        return self.holder.pid

    @property
    def netns(self) -> str:
        return f"/proc/{self.pid}/ns/net"

    def mount_script(self, lines: list[str]) -> None:
        """Shell lines run as root in the sandbox's mount namespace (mounts, folders)."""
        done = subprocess.run([tool("nsenter"), "-t", str(self.pid), "--mount", "--", "/bin/sh", "-ec",
                               "\n".join(lines)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{self.name}: {done.stderr}\n{lines}"

    def bind(self, source: Path, target: str, *, read_only: bool = False) -> None:
        """``source`` (a folder or file of the box) at ``target`` in the sandbox."""
        make = f"mkdir -p {shlex.quote(target)}" if source.is_dir() else \
            f"mkdir -p {shlex.quote(str(Path(target).parent))} && touch {shlex.quote(target)}"
        seen_as = str(source).replace("/tmp/", f"{BOX_TMP}/", 1) if str(source).startswith("/tmp/") else str(source)
        lines = [make, f"mount --bind {shlex.quote(seen_as)} {shlex.quote(target)}"]
        if read_only:
            lines.append(f"mount -o remount,bind,ro {shlex.quote(target)}")
        self.mount_script(lines)

    def host_path(self, path: str) -> Path:
        """Where a file the sandbox sees at ``path`` under /run or /tmp lies on the box."""
        for own in ("run", "tmp"):
            if path.startswith(f"/{own}/"):
                return self.root / own / path[len(own) + 2:]
        raise ValueError(f"{path} is not under the sandbox's own /run or /tmp")

    def command(self, argv: list[str], *, user: User = ROOT_USER, cwd: str = "/",
                privileges: tuple[str, ...] = ()) -> list[str]:
        """``argv`` run in the sandbox as ``user`` (no supplementary groups), from ``cwd``."""
        mount = ["--mount"] if self.own_mounts else []
        # The folder is entered inside the sandbox (nsenter's --wd looks it up on the box).
        return [tool("nsenter"), "-t", str(self.pid), "--net", "--uts", *mount, "--",
                tool("setpriv"), f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", *privileges,
                "--", tool("env"), f"--chdir={cwd}", "--", *argv]

    def popen(self, argv: list[str], *, env: dict[str, str], log: Path, umask: int = 0o022,
              **kwargs) -> subprocess.Popen:
        with log.open("ab") as out:
            return subprocess.Popen(self.command(argv, **kwargs), env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, umask=umask)

    def run(self, argv: list[str], *, env: dict[str, str], timeout: float, umask: int = 0o022,
            **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(argv, **kwargs), env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, umask=umask)

    def read_only_except(self, writable: list[str]) -> None:
        """Every mount read-only but the API file systems (/proc, /sys, /dev) and ``writable``
        (mount points): systemd's ProtectSystem=strict with its ReadWritePaths."""
        keep = " ".join(shlex.quote(path) for path in writable)
        self.mount_script([
            "for mp in $(awk '{print $5}' /proc/self/mountinfo); do",
            "  case $mp in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue ;; esac",
            "  mount -o remount,bind,ro \"$mp\" 2>/dev/null || true",
            "done",
            f"for mp in {keep}; do mount -o remount,bind,rw \"$mp\"; done" if keep else "true",
        ])

    def forward(self, listen: str, to_netns: str, to: str, *, listen_netns: str | None = None,
                postgres: dict[str, dict[str, str]] | None = None) -> None:
        """A forwarder listening at ``listen`` in this sandbox (or in ``listen_netns``) to ``to``
        in ``to_netns`` (`-`: the box's own network)."""
        renames = [f"--pg-{kind}={old}={new}" for kind, pairs in (postgres or {}).items()
                   for old, new in pairs.items()]
        proc = subprocess.Popen([sys.executable, str(FORWARDER), listen_netns or self.netns, listen, to_netns, to,
                                 *renames], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        self.forwarders.append(proc)
        assert proc.stdout.readline().strip() == "ready", f"the forwarder to {to} did not start"

    def close(self) -> None:
        """Every process left in the sandbox killed (a service's children too), then its holder."""
        for proc in self.forwarders:
            _end(proc)
        netns = _readlink(self.netns)
        if netns is not None:
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit() and int(entry.name) != self.pid and _readlink(f"{entry}/ns/net") == netns:
                    try:
                        os.kill(int(entry.name), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        _end(self.holder)


def box_postgres(sandbox: Sandbox, postgres_admin, database: str, user: str) -> tuple[str, Callable[[], None]]:
    """The box's PostgreSQL server (FARM_TEST_POSTGRES_URL) as the recipe's database host: a
    scratch database, served in ``sandbox`` on port 5432 and at /run/postgresql's socket under
    the recipe's ``database`` and ``user`` names (renamed to the scratch database and the
    server's user on the way: trust auth, no password is checked). Returns the scratch
    database's name and what drops it."""
    from sqlalchemy.engine import make_url

    from support.registry_db import POSTGRES_URL, fresh_postgres_database

    url, drop = fresh_postgres_database(postgres_admin)
    scratch = make_url(url).database
    server = make_url(POSTGRES_URL)
    renames = {"database": {database: scratch}, "user": {user: server.username}}
    upstream = f"{server.host}:{server.port or 5432}"
    socket_dir = sandbox.host_path("/run/postgresql/.s.PGSQL.5432").parent
    socket_dir.mkdir(parents=True, exist_ok=True)
    sandbox.forward("0.0.0.0:5432", "-", upstream, postgres=renames)
    sandbox.forward(f"unix:{socket_dir}/.s.PGSQL.5432", "-", upstream, listen_netns="-", postgres=renames)
    return scratch, drop


def stop(proc: subprocess.Popen, grace: float) -> int:
    """What `docker stop` and systemd's stop do: SIGTERM, then SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    return proc.returncode
