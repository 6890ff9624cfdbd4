"""A systemd unit of deploy/systemd started without systemd (this box runs none), on a box that
support.sandboxes makes: what systemd does with the unit's [Service] settings, read from the
unit file itself:

- the environment: the manager's PATH, the User='s USER, LOGNAME, HOME and SHELL (from the box's
  /etc/passwd, where `useradd` put them), `Environment=` (specifiers %S, %C, %t, %h expanded),
  then each `EnvironmentFile=` (its settings override Environment='s), STATE_DIRECTORY and
  CACHE_DIRECTORY;
- `User=` and `Group=` (setpriv), `UMask=`, `NoNewPrivileges=`, an empty
  `CapabilityBoundingSet=`;
- `StateDirectory=` and `CacheDirectory=` made, owned by the user, `StateDirectoryMode=`;
  `PrivateTmp=` (a /tmp and /var/tmp of its own), `ProtectSystem=strict` (everything
  read-only but those), `ProtectHome=yes` (/home, /root and /run/user empty);
- `ExecStartPre=` run to completion (a failure fails the start), then `ExecStart=`, from
  `WorkingDirectory=` (/ by default); a stop is SIGTERM, then SIGKILL after `TimeoutStopSec=`.

Not emulated: seccomp and namespace restrictions (`SystemCallArchitectures=`,
`RestrictAddressFamilies=`, `RestrictNamespaces=`...), `PrivateDevices=`, `ProtectKernel*=`,
`Restart=`, the journal (output goes to a log file).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from support.sandboxes import Sandbox, User, stop

MANAGER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
SPECIFIERS = {"S": "/var/lib", "C": "/var/cache", "t": "/run", "L": "/var/log"}


def service_settings(unit: Path) -> dict[str, list[str]]:
    """The [Service] section: key -> its values, in order."""
    settings: dict[str, list[str]] = {}
    section = None
    for line in unit.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def environment_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile= syntax: KEY=VALUE lines, # and ; comments, quotes removed."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()), f"not KEY=VALUE: {line!r}"
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def expand(text: str, home: str) -> str:
    return re.sub(r"%(.)", lambda m: "%" if m[1] == "%" else {**SPECIFIERS, "h": home}[m[1]], text)


@dataclass
class Unit:
    """A unit of ``path``, to run on ``box`` (prepared: the user exists, /etc/tvm-farm holds its
    files, the checkout and its venv are at /opt/tvm-farm)."""

    path: Path
    box: Sandbox
    log: Path
    settings: dict[str, list[str]] = field(init=False)
    proc: subprocess.Popen | None = None
    prepared: bool = False

    def __post_init__(self):
        self.settings = service_settings(self.path)

    def one(self, key: str, default: str | None = None) -> str | None:
        values = self.settings.get(key, [])
        return values[-1] if values else default

    def user(self) -> User:
        name = self.one("User", "root")
        group = self.one("Group", name)
        ids = self.box.run(["sh", "-c", f"id -u {shlex.quote(name)}; getent group {shlex.quote(group)} | cut -d: -f3"],
                           env={"PATH": MANAGER_PATH}, timeout=30)
        assert ids.returncode == 0, f"User={name}: {ids.stderr}"
        uid, gid = (int(n) for n in ids.stdout.split())
        return User(uid, gid, name)

    def passwd(self, name: str) -> list[str]:
        entry = self.box.run(["getent", "passwd", name], env={"PATH": MANAGER_PATH}, timeout=30).stdout.strip()
        assert entry, f"no user {name} on the box"
        return entry.split(":")

    def environment(self) -> dict[str, str]:
        user = self.user()
        fields = self.passwd(user.name)
        home, shell = fields[5], fields[6]
        env = {"PATH": MANAGER_PATH, "USER": user.name, "LOGNAME": user.name, "HOME": home, "SHELL": shell}
        for line in self.settings.get("Environment", []):
            for assignment in shlex.split(expand(line, home)):
                key, _, value = assignment.partition("=")
                env[key] = value
        for name in self.settings.get("EnvironmentFile", []):
            optional = name.startswith("-")
            path = expand(name.lstrip("-"), home)
            read = self.box.run(["cat", path], env={"PATH": MANAGER_PATH}, timeout=30)
            assert read.returncode == 0 or optional, f"EnvironmentFile={path}: {read.stderr}"
            env.update(environment_file(read.stdout))
        for key, variable, base in (("StateDirectory", "STATE_DIRECTORY", "/var/lib"),
                                    ("CacheDirectory", "CACHE_DIRECTORY", "/var/cache")):
            if self.one(key):
                env[variable] = ":".join(f"{base}/{d}" for d in self.one(key).split())
        return env

    def prepare_filesystem(self) -> None:
        """The directories systemd makes and the namespaces it sets up before the first Exec."""
        user = self.user()
        state_mode = self.one("StateDirectoryMode", "0755")
        writable = []
        for key, base in (("StateDirectory", "/var/lib"), ("CacheDirectory", "/var/cache")):
            for directory in (self.one(key) or "").split():
                source = self.box.root / "systemd" / key / directory
                source.mkdir(parents=True, exist_ok=True)
                source.chmod(int(state_mode, 8) if key == "StateDirectory" else 0o755)
                os.chown(source, user.uid, user.gid)
                self.box.bind(source, f"{base}/{directory}")
                writable.append(f"{base}/{directory}")
        if self.one("PrivateTmp") in ("yes", "true"):
            for private in ("tmp", "var-tmp"):
                path = self.box.root / "systemd" / private
                path.mkdir(parents=True, exist_ok=True)
                path.chmod(0o1777)
            self.box.bind(self.box.root / "systemd" / "tmp", "/tmp")
            self.box.bind(self.box.root / "systemd" / "var-tmp", "/var/tmp")
            writable += ["/tmp", "/var/tmp"]
        if self.one("ProtectHome") in ("yes", "true"):
            self.box.mount_script(["for d in /home /root /run/user; do [ -d $d ] && mount -t tmpfs -o ro,mode=0755 "
                                   "tmpfs $d || true; done"])
        if self.one("ProtectSystem") == "strict":
            self.box.read_only_except(writable)

    def privileges(self) -> tuple[str, ...]:
        out = []
        if self.one("NoNewPrivileges") in ("yes", "true"):
            out.append("--no-new-privs")
        if self.one("CapabilityBoundingSet") == "":
            out += ["--bounding-set=-all", "--inh-caps=-all"]
        return tuple(out)

    def exec_argv(self, line: str, env: dict[str, str]) -> list[str]:
        assert not line.startswith(("-", "+", "!", "@", ":")), f"a prefix this emulation does not run: {line}"
        words = shlex.split(expand(line, env["HOME"]))
        words = [re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m[1] or m[2], ""), w) for w in words]
        assert words[0].startswith("/"), f"systemd needs an absolute path: {words[0]}"
        return words

    def start(self) -> None:
        """`systemctl start`: the ExecStartPre= lines to completion (one failing fails the
        start: an AssertionError with the log), then ExecStart=."""
        if not self.prepared:  # once per box: a restart finds them made
            self.prepare_filesystem()
            self.prepared = True
        env, user = self.environment(), self.user()
        umask = int(self.one("UMask", "0022"), 8)
        cwd = self.one("WorkingDirectory", "/")
        for line in self.settings.get("ExecStartPre", []):
            proc = self.box.popen(self.exec_argv(line, env), env=env, log=self.log, user=user, cwd=cwd,
                                  privileges=self.privileges(), umask=umask)
            code = proc.wait(timeout=900)
            assert code == 0, f"ExecStartPre={line} exited {code}:\n{self.tail()}"
        [line] = self.settings["ExecStart"]
        self.proc = self.box.popen(self.exec_argv(line, env), env=env, log=self.log, user=user, cwd=cwd,
                                   privileges=self.privileges(), umask=umask)

    def stop(self) -> int:
        timeout = self.one("TimeoutStopSec", "90s")
        code = stop(self.proc, float(timeout.rstrip("s"))) if self.proc else 0
        self.proc = None
        return code

    def tail(self, size: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-size:] if self.log.exists() else ""
