"""deploy/systemd's units started as written, without systemd (this box runs none), by
support.systemd_up: a coordinator box and an agent box (support.sandboxes: each its own network
address, host name, mounts), each set up with deploy/README.md's systemd steps as root (useradd,
/etc/tvm-farm and its environment file, token and registry URL file, with the modes and groups
given), TLS turned on by the environment files' documented lines with the files
`deploy/make-certs` made, and a database host serving the box's PostgreSQL. Each unit runs with
what systemd would give it from the unit file: its User=, Environment= and EnvironmentFile=,
StateDirectory=, PrivateTmp=, ProtectSystem=strict (all read-only but its directories),
ExecStartPre= then ExecStart=. A workstation then submits a tiny job with the token and the CA,
and it succeeds; the upgrade is the README's: stop the coordinator, a registry of the previous
schema (the job in it), start the unit again (its ExecStartPre upgrades it).

Not exercised here, and why: `git clone` and deploy/systemd/install-venv (pip and the package
index): the checkout and its test venv (the farm installed editable) are bound at /opt/tvm-farm;
systemd's seccomp and namespace restrictions (support.systemd_up says which settings are not
emulated); the PostgreSQL password (trust auth).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from foundation.registry import migrate

from support.deploy_recipes import ROOT, SYSTEMD, needs_openssl
from support.registry_db import admin_url
from support.sandboxes import Network, Sandbox, box_postgres, unavailable
from support.systemd_up import MANAGER_PATH, Unit

WHY_NOT = unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.postgres, needs_openssl,
              pytest.mark.skipif(WHY_NOT is not None, reason=f"no sandboxes here: {WHY_NOT}"),
              pytest.mark.skipif(shutil.which("useradd") is None, reason="useradd (passwd) is not installed")]

COORDINATOR_HOST = "coordinator.example.internal"
JOB = ["submit", "mlp-tiny", "llvm", "1", "--trials", "8", "--runs", "3", "--timeout", "900", "--json"]
FARM = str(Path(sys.executable).with_name("farm"))

# deploy/README.md's systemd steps on each box, as root (the install itself, `git clone` and
# install-venv, is the checkout bound at /opt/tvm-farm).
SETUP = """
useradd --system --home-dir /var/lib/tvm-farm --shell /usr/sbin/nologin tvm-farm
install -d -m 0750 -g tvm-farm /etc/tvm-farm
install -m 0640 -g tvm-farm /opt/tvm-farm/deploy/systemd/{role}.env /etc/tvm-farm/{role}.env
cp /opt/tvm-farm/deploy/systemd/farm-{role}.service /etc/systemd/system/
"""
TOKEN = "(umask 027; printf '%s\\n' {token} > /etc/tvm-farm/token) && chgrp tvm-farm /etc/tvm-farm/token"
REGISTRY = ("install -m 0640 -g tvm-farm /dev/null /etc/tvm-farm/registry-url && "
            "printf '%s\\n' {url} > /etc/tvm-farm/registry-url")
# TLS, as the README says: the coordinator's files by make-certs, given to the service's user;
# the agent's CA copied beside its settings; the commented FARM_TLS_ lines turned on.
COORDINATOR_TLS = ("/opt/tvm-farm/deploy/make-certs /etc/tvm-farm/tls --name {host} "
                   "--owner \"$(id -u tvm-farm):$(id -g tvm-farm)\"\n"
                   "sed -i -E 's/^#(FARM_TLS_(CERT|KEY)=)/\\1/' /etc/tvm-farm/coordinator.env")
AGENT_TLS = ("install -d -m 0750 -g tvm-farm /etc/tvm-farm/tls && "
             "printf '%s' {ca} > /etc/tvm-farm/tls/ca.crt && chmod 0644 /etc/tvm-farm/tls/ca.crt\n"
             "sed -i -E 's/^#(FARM_TLS_CA=)/\\1/' /etc/tvm-farm/agent.env\n"
             "sed -i 's/^FARM_COORDINATOR=CHANGE-ME-coordinator.example.internal:50051$/"
             "FARM_COORDINATOR={host}:50051/' /etc/tvm-farm/agent.env")


def as_root(box: Sandbox, script: str) -> str:
    done = box.run(["/bin/sh", "-ec", script], env={"PATH": MANAGER_PATH}, timeout=120)
    assert done.returncode == 0, f"{box.name}: {done.stderr}\n{script}"
    return done.stdout


class Farm:
    """The boxes and their units."""

    def __init__(self, work: Path, postgres_admin):
        self.work = work
        self.network = Network(work / "network")
        self.boxes: list[Sandbox] = []
        self.drops = []
        self.db = self.box("db", ["db.example.internal", "db"])
        self.database, drop = box_postgres(self.db, postgres_admin, "farm", "farm")
        self.drops.append(drop)
        self.coordinator_box = self.box("coordinator", [COORDINATOR_HOST, "coordinator"])
        self.agent_box = self.box("agent", ["agent.example.internal", "agent"])
        self.workstation = self.box("workstation", ["workstation"])
        for box, role in ((self.coordinator_box, "coordinator"), (self.agent_box, "agent")):
            box.bind(ROOT, "/opt/tvm-farm", read_only=True)
            as_root(box, SETUP.format(role=role))
        self.token = os.urandom(32).hex()
        for box in (self.coordinator_box, self.agent_box):
            as_root(box, TOKEN.format(token=self.token))
        url = f"postgresql://farm:{os.urandom(8).hex()}@db.example.internal:5432/farm"
        as_root(self.coordinator_box, REGISTRY.format(url=shlex.quote(url)))
        as_root(self.coordinator_box, COORDINATOR_TLS.format(host=COORDINATOR_HOST))
        self.ca = as_root(self.coordinator_box, "cat /etc/tvm-farm/tls/ca.crt")
        as_root(self.agent_box, AGENT_TLS.format(ca=shlex.quote(self.ca), host=COORDINATOR_HOST))
        self.coordinator = Unit(SYSTEMD / "farm-coordinator.service", self.coordinator_box,
                                work / "logs" / "farm-coordinator.log")
        self.agent = Unit(SYSTEMD / "farm-agent.service", self.agent_box, work / "logs" / "farm-agent.log")
        (work / "logs").mkdir(parents=True, exist_ok=True)

    def box(self, name: str, names: list[str]) -> Sandbox:
        box = Sandbox(name, self.work / "boxes" / name, self.network, names[-1], names)
        self.boxes.append(box)
        return box

    def client(self, *args: str) -> dict | list:
        """A `farm` command on a workstation with the token and the CA."""
        home = "/tmp/home"  # the workstation's own /tmp
        on_box = self.workstation.host_path(f"{home}/token").parent
        if not on_box.exists():
            on_box.mkdir()
            (on_box / "token").write_text(self.token + "\n")
            (on_box / "ca.crt").write_text(self.ca)
        argv = [FARM, *args, "--coordinator", f"{COORDINATOR_HOST}:50051", "--tls-ca", f"{home}/ca.crt",
                "--token-file", f"{home}/token"]
        done = self.workstation.run(argv, env={"PATH": os.defpath, "HOME": home, "FARM_HOME": home}, timeout=1200)
        assert done.returncode == 0, f"{done.stderr}\n{self.coordinator.tail()}\n{self.agent.tail()}"
        return json.loads(done.stdout)

    def wait_for_agent(self, timeout: float = 600) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            assert self.agent.proc.poll() is None, f"farm-agent exited:\n{self.agent.tail()}"
            assert self.coordinator.proc.poll() is None, f"farm-coordinator exited:\n{self.coordinator.tail()}"
            try:
                agents = [a for a in self.client("agents", "--json") if a["state"] in ("idle", "busy")]
            except AssertionError:
                agents = []  # the coordinator is still starting
            if agents:
                return agents[0]
            assert time.monotonic() < deadline, f"no agent registered:\n{self.agent.tail()}"
            time.sleep(2)

    def close(self) -> None:
        for unit in (self.agent, self.coordinator):
            unit.stop()
        for box in self.boxes:
            box.close()
        self.network.close()
        for drop in self.drops:
            drop()


def scratch_revision(database: str) -> str | None:
    from sqlalchemy import create_engine

    engine = create_engine(make_url(admin_url()).set(database=database))
    try:
        with engine.connect() as connection:
            return migrate.current_revision(connection)
    finally:
        engine.dispose()


def downgrade_one(database: str) -> None:
    from alembic import command
    from sqlalchemy import create_engine

    engine = create_engine(make_url(admin_url()).set(database=database))
    try:
        with engine.begin() as connection:
            command.downgrade(migrate.alembic_config(connection), "-1")
    finally:
        engine.dispose()


@pytest.fixture
def farm(tmp_path, postgres_admin):
    made = Farm(tmp_path, postgres_admin)
    try:
        yield made
    finally:
        made.close()


def test_systemd_units_run_a_job_and_upgrade_the_registry(farm):
    assert scratch_revision(farm.database) is None
    farm.coordinator.start()  # its ExecStartPre created the schema, or the start failed
    assert scratch_revision(farm.database) == migrate.head_revision()
    farm.agent.start()
    agent = farm.wait_for_agent()
    assert agent["hostname"] == "agent", agent

    result = farm.client(*JOB)
    assert result["state"] == "succeeded" and not result["cache_hit"], result
    assert result["artifact"]["validation"]["passed"], result

    # `git pull && install-venv`, then `systemctl restart farm-coordinator`: the registry (the
    # job in it) at the previous schema, upgraded by the unit's ExecStartPre on the way up.
    assert farm.coordinator.stop() == 0, farm.coordinator.tail()
    downgrade_one(farm.database)
    assert scratch_revision(farm.database) != migrate.head_revision()
    farm.coordinator.start()
    assert scratch_revision(farm.database) == migrate.head_revision()
    farm.wait_for_agent()
    hit = farm.client(*JOB)
    assert hit["state"] == "succeeded" and hit["cache_hit"], hit
    assert hit["artifact"]["id"] == result["artifact"]["id"]
