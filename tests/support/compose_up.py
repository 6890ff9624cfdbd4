"""`docker compose up` of deploy/compose/compose.yaml without a container engine: each service
the file describes becomes a sandbox (support.sandboxes) running the service's own command line
(the image's ENTRYPOINT and the service's `command`), as the image's user, with the image's
ENV and the service's `environment`, its secrets where Compose puts them (/run/secrets/TARGET:
a secret taken from the environment written with its uid, gid and mode; a file secret bound as
it is on the host), its named volumes, its host name, reachable by its service name; services
start in their `depends_on` order and conditions, and a healthcheck is the service's `test`,
run in its sandbox as `docker exec` would, on its interval, timeout, retries and start period.

What stands in for what an engine would have:
- the image: deploy/docker/Dockerfile read for its ENTRYPOINT, ENV, USER (its uid from the
  useradd line), WORKDIR and home; the checkout (with the test venv, where the farm is
  installed editable) bound at the image's WORKDIR in place of what `docker build` installs;
- `postgres:16` (the PostgreSQL image): the box's PostgreSQL server (FARM_TEST_POSTGRES_URL),
  reached at the service's name and port through a forwarder that renames the image's
  POSTGRES_DB to a scratch database and POSTGRES_USER to the server's user (trust auth, so the
  password, though read from POSTGRES_PASSWORD_FILE as the image reads it, is not checked),
  and at its Unix socket in /run/postgresql, which the healthcheck's pg_isready asks;
- published ports: a forwarder from the "host" sandbox's address to the service's;
- `init: true`, restart policies, and resource limits: not emulated (a service that exits is
  not restarted).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from support.deploy_recipes import COMPOSE_FILE, DOCKERFILES, ROOT, interpolate, read_compose_env_file
from support.sandboxes import Network, Sandbox, User, box_postgres, stop

# PATH of the base image (python:3.11-slim), which the Dockerfile's ENV extends.
BASE_PATH = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"


def seconds(text: str | int | float) -> float:
    """A Compose duration: 1m30s, 10s, 500ms."""
    if isinstance(text, (int, float)):
        return float(text)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", text)
    assert parts and "".join(a + b for a, b in parts) == text, f"not a duration: {text!r}"
    return sum(float(amount) * units[unit] for amount, unit in parts)


def mode(value) -> int:
    return value if isinstance(value, int) else int(str(value).removeprefix("0o"), 8)


@dataclass
class Image:
    """What `docker build` of a Dockerfile gives a container: entrypoint, environment, user,
    working directory, where the checkout is copied (`COPY . .`), and the folders it makes that a
    named volume copies its owner from."""

    entrypoint: list[str]
    env: dict[str, str]
    user: User
    workdir: str
    owned: dict[str, User]
    checkout: str | None = None

    @staticmethod
    def read(path: Path) -> "Image":
        import dockerfile

        commands = dockerfile.parse_file(str(path))
        env: dict[str, str] = {"PATH": BASE_PATH}
        user_name, workdir, entrypoint, checkout = "root", "/", [], None
        for c in commands:
            if c.cmd == "ENV":
                for key, value in zip(c.value[::2], c.value[1::2], strict=True):
                    env[key] = value.replace("$PATH", env.get("PATH", ""))
            elif c.cmd == "USER":
                user_name = c.value[0]
            elif c.cmd == "WORKDIR":
                workdir = c.value[0]
            elif c.cmd == "COPY" and list(c.value) == [".", "."]:
                checkout = workdir
            elif c.cmd == "ENTRYPOINT":
                assert c.json, "an exec-form ENTRYPOINT"
                entrypoint = list(c.value)
        runs = " ".join(c.value[0] for c in commands if c.cmd == "RUN")
        made = re.search(rf"useradd\b[^&]*?--uid (\d+)\b[^&]*?--gid (\S+)[^&]*?--home-dir (\S+)[^&]*?\b{user_name}\b",
                         runs)
        assert made, f"{path.name}: no useradd of {user_name} with --uid, --gid and --home-dir"
        gid = re.search(rf"groupadd\b[^&]*--gid (\d+)\b[^&]*\b{re.escape(made[2])}\b", runs)
        assert gid, f"{path.name}: no groupadd of {made[2]} with --gid"
        user = User(int(made[1]), int(gid[1]), user_name)
        assert checkout, f"{path.name}: no `COPY . .` of the checkout"
        return Image(entrypoint, env, user, workdir, {made[3]: user}, checkout)


@dataclass
class Service:
    name: str
    spec: dict

    @property
    def argv(self) -> list[str]:
        return [str(a) for a in self.spec.get("command", [])]

    @property
    def environment(self) -> dict[str, str]:
        env = self.spec.get("environment") or {}
        if isinstance(env, list):
            env = dict(item.split("=", 1) for item in env)
        return {k: str(v) for k, v in env.items()}

    @property
    def depends_on(self) -> dict[str, str]:
        depends = self.spec.get("depends_on") or {}
        if isinstance(depends, list):
            return dict.fromkeys(depends, "service_started")
        return {name: d.get("condition", "service_started") for name, d in depends.items()}

    def secrets(self) -> list[dict]:
        out = []
        for item in self.spec.get("secrets", []):
            item = {"source": item} if isinstance(item, str) else dict(item)
            item.setdefault("target", item["source"])
            out.append(item)
        return out

    def healthcheck_argv(self) -> list[str] | None:
        check = self.spec.get("healthcheck")
        if not check or check.get("disable"):
            return None
        test = check["test"]
        if isinstance(test, str):
            return ["/bin/sh", "-c", test]
        if test[0] == "CMD":
            return list(test[1:])
        assert test[0] == "CMD-SHELL", test
        return ["/bin/sh", "-c", test[1]]


@dataclass
class Running:
    service: Service
    sandbox: Sandbox
    user: User
    env: dict[str, str]
    cwd: str
    argv: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None


@dataclass
class ComposeUp:
    """The compose project in ``directory`` (compose.yaml's folder, where the user's .env and
    deploy/make-certs' tls/ are), brought up service by service."""

    directory: Path
    work: Path
    postgres_admin: object
    compose_file: Path = COMPOSE_FILE
    compose_text: str | None = None
    env: dict[str, str] = field(init=False)
    services: dict[str, Service] = field(init=False)
    secrets: dict[str, dict] = field(init=False)
    running: dict[str, Running] = field(default_factory=dict)
    scratch_database: str | None = None
    # Checks run once a one-shot service (`migrate`) has exited 0, before what waits for it starts.
    after_completion: dict[str, Callable[[], None]] = field(default_factory=dict)
    _drops: list = field(default_factory=list)

    def __post_init__(self):
        from ruamel.yaml import YAML

        self.env = read_compose_env_file(self.directory / ".env")
        text = interpolate(self.compose_text or self.compose_file.read_text(), self.env)
        document = YAML(typ="safe", pure=True).load(text)  # YAML 1.2, as Compose reads it
        self.services = {name: Service(name, spec) for name, spec in document["services"].items()}
        self.secrets = document.get("secrets", {})
        self.volumes = document.get("volumes", {})
        self.network = Network(self.work / "network")
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        # The Docker host: where published ports listen, and where a client outside compose runs.
        self.host = Sandbox("host", self.work / "sandboxes" / "host", self.network, "docker-host", ["docker-host"],
                            own_mounts=False)

    # ------------------------------------------------------------------ bring-up
    def image_of(self, service: Service) -> Image:
        build = service.spec.get("build")
        assert build, f"{service.name}: only images built from this repository run here"
        assert (self.compose_file.parent / build["context"]).resolve() == ROOT
        dockerfile = ROOT / build["dockerfile"]
        assert dockerfile in DOCKERFILES.values(), dockerfile
        return Image.read(dockerfile)

    def sandbox_of(self, service: Service) -> Sandbox:
        hostname = service.spec.get("hostname", service.name)
        names = [service.name] + ([hostname] if hostname != service.name else [])
        return Sandbox(service.name, self.work / "sandboxes" / service.name, self.network, hostname, names)

    def create(self, name: str) -> Running:
        """The service's container, created (sandbox, secrets, volumes) but not started."""
        if name in self.running:
            return self.running[name]
        service = self.services[name]
        sandbox = self.sandbox_of(service)
        if self.is_postgres_image(service):
            image = Image([], {"PATH": BASE_PATH}, User(0, 0, "root"), "/", {})
        else:
            image = self.image_of(service)
            # What `docker build` installed there: the checkout, its venv holding the farm; and
            # the folders it made (the user's home), in the sandbox's overlay.
            sandbox.bind(ROOT, image.checkout, read_only=True)
            sandbox.mount_script([f"mkdir -p {folder} && chown {user.uid}:{user.gid} {folder}"
                                  for folder, user in image.owned.items()])
        self._place_secrets(service, sandbox)
        for volume in service.spec.get("volumes", []):
            source, target = str(volume).split(":")[:2]
            assert not source.startswith((".", "/")), f"{name}: bind mounts are not emulated ({volume})"
            assert source in self.volumes, f"{name}: volume {source} is not declared"
            path = self.work / "volumes" / source
            if not path.exists():
                path.mkdir(parents=True)
                owner = image.owned.get(target)
                if owner:  # a new volume takes the owner of the image's folder it is mounted on
                    os.chown(path, owner.uid, owner.gid)
            sandbox.bind(path, target)
        env = {**image.env, "HOSTNAME": sandbox.hostname, **service.environment}
        running = Running(service, sandbox, image.user, env, image.workdir, image.entrypoint + service.argv)
        self.running[name] = running
        return running

    def _place_secrets(self, service: Service, sandbox: Sandbox) -> None:
        for item in service.secrets():
            declared = self.secrets[item["source"]]
            target = item["target"] if item["target"].startswith("/") else f"/run/secrets/{item['target']}"
            if "environment" in declared:
                # Compose copies it into the container with the uid, gid and mode given.
                path = sandbox.host_path(target)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(self.env[declared["environment"]])
                os.chown(path, int(item.get("uid", 0)), int(item.get("gid", 0)))
                path.chmod(mode(item.get("mode", 0o444)))
            else:
                # A file secret is bind-mounted as it is on the host: uid and mode are ignored.
                source = (self.directory / declared["file"]).resolve()
                assert source.is_file(), f"{service.name}: secret {item['source']} needs {source}"
                sandbox.bind(source, target, read_only=True)

    def start(self, name: str) -> Running:
        """The service, once each of its dependencies has met its condition (as `up` does)."""
        for dependency, condition in self.services[name].depends_on.items():
            if condition == "service_completed_successfully":
                code = self.run_to_completion(dependency)
                assert code == 0, f"{dependency} exited {code}:\n{self.tail(dependency)}"
                self.after_completion.get(dependency, lambda: None)()
            else:
                if dependency not in self.running:
                    self.start(dependency)
                if condition == "service_healthy":
                    self.wait_healthy(dependency)
        running = self.create(name)
        if self.is_postgres_image(running.service):
            self._stand_in_postgres(running)
        else:
            running.proc = running.sandbox.popen(running.argv, env=running.env, log=self.log(name),
                                                 user=running.user, cwd=running.cwd)
        for mapping in running.service.spec.get("ports", []):
            self._publish(running, str(mapping))
        return running

    @staticmethod
    def is_postgres_image(service: Service) -> bool:
        return str(service.spec.get("image", "")).startswith("postgres:") and "build" not in service.spec

    def _publish(self, running: Running, mapping: str) -> None:
        host_ip, host_port, container_port = mapping.rsplit(":", 2)
        running.sandbox.forward(f"{host_ip}:{host_port}", self.network.netns,
                                f"{running.sandbox.address}:{container_port}", listen_netns=self.host.netns)

    def _stand_in_postgres(self, running: Running) -> None:
        """The PostgreSQL image's first start, on the box's server: its user and database, the
        password read from POSTGRES_PASSWORD_FILE as its entrypoint reads it."""
        env = running.service.environment
        password = running.sandbox.host_path(env["POSTGRES_PASSWORD_FILE"]).read_text()
        assert password and "POSTGRES_PASSWORD" not in env, "the image takes one of the two, the file here"
        self.scratch_database, drop = box_postgres(running.sandbox, self.postgres_admin,
                                                   env.get("POSTGRES_DB", env["POSTGRES_USER"]), env["POSTGRES_USER"])
        self._drops.append(drop)

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def tail(self, name: str, size: int = 4000) -> str:
        path = self.log(name)
        return path.read_text(errors="replace")[-size:] if path.exists() else ""

    def healthcheck(self, name: str, *, argv: list[str] | None = None) -> subprocess.CompletedProcess:
        running = self.running[name]
        check = running.service.spec["healthcheck"]
        argv = argv or running.service.healthcheck_argv()
        try:
            return running.sandbox.run(argv, env=running.env, user=running.user, cwd=running.cwd,
                                       timeout=seconds(check.get("timeout", "30s")))
        except subprocess.TimeoutExpired as err:
            return subprocess.CompletedProcess(argv, 124, "", f"timed out: {err}")

    def wait_healthy(self, name: str, *, poll: float = 2.0) -> None:
        """Healthy once a check passes; unhealthy (an AssertionError) after the start period and
        `retries` failures a whole interval apart, or when the process exits. Checks come every
        ``poll`` seconds at most (sooner than the interval), which only makes it healthy sooner."""
        running = self.running[name]
        check = running.service.spec["healthcheck"]
        interval = seconds(check.get("interval", "30s"))
        deadline = time.monotonic() + seconds(check.get("start_period", "0s")) + interval * check.get("retries", 3)
        while True:
            result = self.healthcheck(name)
            if result.returncode == 0:
                return
            assert running.proc is None or running.proc.poll() is None, \
                f"{name} exited {running.proc.returncode}:\n{self.tail(name)}"
            assert time.monotonic() < deadline, \
                f"{name} is unhealthy: {result.stdout}{result.stderr}\n{self.tail(name)}"
            time.sleep(min(poll, interval))

    def run_to_completion(self, name: str, timeout: float = 600) -> int:
        running = self.start(name)
        try:
            return running.proc.wait(timeout=timeout)
        finally:
            del self.running[name]  # a one-shot container: `up` creates it anew
            running.sandbox.close()

    def up(self, names: list[str]) -> None:
        """`docker compose up SERVICE...`: each one not running yet, after its dependencies."""
        for name in names:
            if name not in self.running:
                self.start(name)

    def stop(self, name: str) -> int:
        """`docker compose stop`: SIGTERM, SIGKILL after stop_grace_period (10 s by default)."""
        running = self.running.pop(name)
        code = stop(running.proc, seconds(running.service.spec.get("stop_grace_period", "10s"))) \
            if running.proc else 0
        running.sandbox.close()
        return code

    def exec(self, name: str, argv: list[str], *, timeout: float = 600) -> subprocess.CompletedProcess:
        """`docker compose exec SERVICE ARGV`: in its sandbox, as its user, with its environment."""
        running = self.running[name]
        return running.sandbox.run(argv, env=running.env, user=running.user, cwd=running.cwd, timeout=timeout)

    def down(self) -> None:
        for name in list(self.running):
            try:
                self.stop(name)
            except Exception:  # the rest must still go down
                pass
        self.host.close()
        self.network.close()
        for drop in self._drops:
            drop()


def user_env_file(example: Path, target: Path) -> dict[str, str]:
    """What a user's .env is: example.env with every CHANGE-ME replaced by a new secret."""
    text = re.sub(r"CHANGE-ME[A-Za-z0-9-]*", lambda _: secrets.token_hex(16), example.read_text())
    target.write_text(text)
    return read_compose_env_file(target)
