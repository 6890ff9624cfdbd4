"""deploy/compose/compose.yaml brought up as the file describes it, without a container engine
(this box has the docker client only: no daemon, no Docker Hub), by support.compose_up: every
service in its own network, mount and UTS namespaces, running its own command line as the
image's user with its environment, its secrets where Compose puts them (uid, gid and mode), the
TLS files `deploy/make-certs tls --owner 10001:10001` made (as the README says), its named
volumes and host name, in its `depends_on` order and conditions, each healthcheck run as
written inside its service. Then a client on the Docker host submits a tiny job through the
published port with the recipe's TLS and token, and it succeeds; `docker compose exec` in an
agent reads it back; the registry's schema is upgraded as the recipe upgrades it (stop the
coordinator, `up` again: the `migrate` service runs before it) on the running registry, whose
job and library are still there after it.

What a change to the recipe breaks here: a command line (an option the farm does not take, a
wrong address), an environment name the farm does not read (its setting is then missing), a
secret's path or owner (the farm cannot read the file), a healthcheck that does not ask what
it should (the service never becomes healthy and nothing after it starts).

Not exercised here, and why:
- the images: `docker build` needs an engine and the base images (no registry is reachable);
  the checkout and its test venv (the farm installed editable, Python 3.11) stand in for what
  deploy/docker/Dockerfile installs, bound where its `COPY . .` puts the checkout; its
  ENTRYPOINT, ENV, USER and WORKDIR are read from the Dockerfile. Digests of the base images: none resolvable here.
- the PostgreSQL image: the box's PostgreSQL server stands in, a scratch database renamed to
  the image's POSTGRES_DB on the way (trust auth: the password is read from its file but not
  checked). Prometheus and Grafana are not started (their images are not here).
- Compose's own parts: its DNS (an /etc/hosts of every service), tini (`init: true`), restart
  policies; checks come every 2 s at most rather than at the written interval.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from alembic import command
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from foundation.registry import migrate

from support.compose_up import ComposeUp, user_env_file
from support.deploy_recipes import COMPOSE_DIR, COMPOSE_FILE, make_certs, needs_openssl
from support.registry_db import admin_url
from support.sandboxes import unavailable

WHY_NOT = unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.postgres, needs_openssl,
              pytest.mark.skipif(WHY_NOT is not None, reason=f"no sandboxes here: {WHY_NOT}"),
              pytest.mark.skipif(shutil.which("pg_isready") is None,
                                 reason="pg_isready (the postgres service's healthcheck) is not installed")]

# migrate runs as the coordinator's dependency (service_completed_successfully).
SERVICES = ["postgres", "coordinator", "agent-1", "agent-2"]
JOB = ["submit", "mlp-tiny", "llvm", "1", "--trials", "8", "--runs", "3", "--timeout", "900", "--json"]
FARM = str(Path(sys.executable).with_name("farm"))


@pytest.fixture
def project(tmp_path) -> Path:
    """deploy/compose as a user prepares it: .env from example.env with every CHANGE-ME set,
    and `sudo ../make-certs tls --owner 10001:10001`."""
    directory = tmp_path / "compose"
    directory.mkdir()
    user_env_file(COMPOSE_DIR / "example.env", directory / ".env")
    made = make_certs(directory / "tls", "--owner", "10001:10001")
    assert made.returncode == 0, made.stderr
    return directory


def scratch_url(up: ComposeUp) -> str:
    return make_url(admin_url()).set(database=up.scratch_database).render_as_string(hide_password=False)


def revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return migrate.current_revision(connection)
    finally:
        engine.dispose()


def downgrade_one(url: str) -> str:
    """The registry as the previous release's schema had it (its rows kept)."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            command.downgrade(migrate.alembic_config(connection), "-1")
            return migrate.current_revision(connection)
    finally:
        engine.dispose()


def from_the_host(up: ComposeUp, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """A `farm` command on the Docker host, as the README says: --coordinator 127.0.0.1:50051
    --tls-ca tls/ca.crt --token-file FILE (the token of .env)."""
    token = tmp_path / "token"
    if not token.exists():
        token.write_text(up.env["FARM_TOKEN"])
        token.chmod(0o600)
    env = {"PATH": os.defpath, "HOME": str(tmp_path / "client"), "FARM_HOME": str(tmp_path / "client")}
    argv = [FARM, *args, "--coordinator", "127.0.0.1:50051", "--tls-ca", str(up.directory / "tls" / "ca.crt"),
            "--token-file", str(token)]
    return up.host.run(argv, env=env, timeout=1200)


@pytest.fixture
def compose_up(project, tmp_path, postgres_admin):
    up = ComposeUp(project, tmp_path / "up", postgres_admin)
    try:
        yield up
    finally:
        up.down()


def schema_is_current(up: ComposeUp):
    """What migrate's exit 0 must mean: the recipe's database holds the newest schema (checked
    before the coordinator starts, which would otherwise be the one to find it)."""
    def check() -> None:
        assert revision(scratch_url(up)) == migrate.head_revision(), "migrate left no current schema there"
    return check


def registered_agents(up: ComposeUp, tmp_path: Path, count: int, timeout: float = 300) -> list[dict]:
    """The agents the coordinator lists, once there are ``count`` (an agent's healthcheck asks
    only whether its loop turns, not whether it reached the coordinator)."""
    deadline = time.monotonic() + timeout
    while True:
        listed = from_the_host(up, tmp_path, "agents", "--json")
        agents = json.loads(listed.stdout) if listed.returncode == 0 else []
        if len([a for a in agents if a["state"] in ("idle", "busy")]) >= count:
            return agents
        assert time.monotonic() < deadline, f"{listed.stderr}{agents}\n{up.tail('agent-1')}"
        time.sleep(2)


def test_compose_up_runs_a_job_and_upgrades_the_registry(compose_up, tmp_path):
    up = compose_up
    up.after_completion["migrate"] = schema_is_current(up)
    up.up(SERVICES)
    up.wait_healthy("coordinator")
    # The coordinator's healthcheck as it was (plaintext) gets no answer from the TLS port.
    [*argv, code] = up.running["coordinator"].service.healthcheck_argv()
    plaintext = code.replace("grpc.secure_channel('127.0.0.1:50051', c)", "grpc.insecure_channel('127.0.0.1:50051')")
    assert plaintext != code and up.healthcheck("coordinator", argv=[*argv, plaintext]).returncode != 0
    for name in ("agent-1", "agent-2"):
        up.wait_healthy(name)
    agents = registered_agents(up, tmp_path, 2)
    assert {a["hostname"] for a in agents} == {"agent-1", "agent-2"}, agents

    done = from_the_host(up, tmp_path, *JOB)
    assert done.returncode == 0, f"{done.stderr}\n{up.tail('coordinator')}\n{up.tail('agent-1')}"
    result = json.loads(done.stdout)
    assert result["state"] == "succeeded" and not result["cache_hit"], result
    assert result["artifact"]["validation"]["passed"], result
    job = result["job"]
    # `docker compose exec agent-1 farm ...` finds the token and the CA by the container's
    # environment (FARM_TOKEN_FILE, FARM_TLS_CA), as the README's line does.
    status = up.exec("agent-1", ["farm", "status", job, "--coordinator", "coordinator:50051", "--json"])
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "succeeded"

    # The upgrade: the registry as the previous schema left it (holding the job), the
    # coordinator stopped, `docker compose up -d` again: migrate upgrades it, then the
    # coordinator starts on it.
    assert up.stop("coordinator") == 0, up.tail("coordinator")
    assert downgrade_one(scratch_url(up)) != migrate.head_revision()
    up.up(SERVICES)
    up.wait_healthy("coordinator")
    again = from_the_host(up, tmp_path, *JOB)
    assert again.returncode == 0, f"{again.stderr}\n{up.tail('coordinator')}"
    hit = json.loads(again.stdout)
    assert hit["state"] == "succeeded" and hit["cache_hit"], hit
    assert hit["artifact"]["id"] == result["artifact"]["id"], "the library the job made before the upgrade"
    for name in ("coordinator", "agent-1", "agent-2"):
        assert up.running[name].proc.poll() is None, up.tail(name)


def broken(project: Path, tmp_path: Path, postgres_admin, edit) -> ComposeUp:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    edit(document["services"])
    up = ComposeUp(project, tmp_path / "broken", postgres_admin, compose_text=yaml.safe_dump(document))
    up.after_completion["migrate"] = schema_is_current(up)
    return up


def rename_env(service: dict, old: str, new: str) -> None:
    service["environment"][new] = service["environment"].pop(old)


BROKEN = {
    # A secret's path: no token file there, the coordinator stops (not found, exit 3).
    "token-path": (lambda s: s["coordinator"]["command"].__setitem__(8, "/run/secrets/farm-token"),
                   "coordinator exited 3:\nerror: cannot read the token file /run/secrets/farm-token"),
    # The key's secret under another target: --tls-key names no file (not found, exit 3).
    "tls-key-target": (lambda s: s["coordinator"]["secrets"].__setitem__(
        3, {"source": "farm_tls_key", "target": "tls_key"}),
        "coordinator exited 3:\nerror: cannot read the TLS key /run/secrets/farm_tls_key"),
    # An environment name the farm does not read: migrate upgrades a SQLite registry of its own.
    "registry-env-name": (lambda s: rename_env(s["migrate"], "FARM_REGISTRY_FILE", "FARM_REGISTRY_PATH"),
                          "no current schema"),
    # The registry's secret readable by root only: the image's user cannot read it.
    "registry-owner": (lambda s: s["migrate"]["secrets"][0].__setitem__("uid", "0"), "migrate exited 2"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_compose_up_fails_on_a_broken_recipe(project, tmp_path, postgres_admin, case):
    """What the test above meets where the recipe is wrong: each edit stops the bring-up."""
    edit, fails = BROKEN[case]
    up = broken(project, tmp_path, postgres_admin, edit)
    try:
        with pytest.raises(AssertionError, match=fails):
            up.up(["postgres", "coordinator"])
            up.wait_healthy("coordinator")
    finally:
        up.down()


def test_the_broken_recipes_edit_what_they_say():
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    assert services["coordinator"]["command"][7:9] == ["--token-file", "/run/secrets/farm_token"]
    assert services["coordinator"]["secrets"][3] == "farm_tls_key"
    assert services["migrate"]["secrets"][0]["uid"] == "10001"
    assert "FARM_REGISTRY_FILE" in services["migrate"]["environment"]
