"""deploy/systemd: `systemd-analyze verify` and `systemd-analyze security --offline` on the units
(where systemd-analyze is installed), their settings and environment files against the interface.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from support.deploy_recipes import AGENT_ENV, COORDINATOR_ENV, OTHER_ENV, SYSTEMD, host_port, read_env_file

UNITS = {"coordinator": SYSTEMD / "farm-coordinator.service", "agent": SYSTEMD / "farm-agent.service"}
INSTALLED_FARM = "/opt/tvm-farm/.venv/bin/farm"


def unit_settings(path: Path) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def unit_with_stub(unit: Path, tmp_path: Path) -> Path:
    """A copy of `unit` whose ExecStart (and ExecStartPre) run a stub in tmp_path.
    `systemd-analyze verify` fails on an Exec binary that does not exist, and
    /opt/tvm-farm/.venv/bin/farm exists only where the recipe is installed; everything else in
    the copy is the unit as shipped."""
    stub = tmp_path / "farm"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    text = unit.read_text()
    assert f"ExecStart={INSTALLED_FARM} " in text
    copy_path = tmp_path / unit.name
    copy_path.write_text(re.sub(rf"^(ExecStart(?:Pre)?)={re.escape(INSTALLED_FARM)} ", rf"\1={stub} ", text,
                                flags=re.M))
    return copy_path


def systemd_verify(unit: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                          timeout=120, cwd=unit.parent)


needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="systemd-analyze is not installed (Debian package systemd)")


@needs_systemd_analyze
@pytest.mark.parametrize("role", sorted(UNITS))
def test_systemd_unit_verifies(role, tmp_path):
    result = systemd_verify(unit_with_stub(UNITS[role], tmp_path))
    # verify exits 0 on unknown keys and bad values (it only warns): any output is a failure.
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), \
        result.stdout + result.stderr


@needs_systemd_analyze
@pytest.mark.parametrize("role", sorted(UNITS))
def test_systemd_unit_is_hardened(role, tmp_path):
    unit = unit_with_stub(UNITS[role], tmp_path)
    result = subprocess.run(["systemd-analyze", "security", "--offline=true", "--threshold=40", "--no-pager",
                             str(unit)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert level, result.stdout + result.stderr
    assert result.returncode == 0 and float(level.group(1)) <= 4.0, result.stdout[-2000:]


@pytest.mark.parametrize("role", sorted(UNITS))
def test_systemd_unit_settings(role):
    settings = unit_settings(UNITS[role])
    service = settings["Service"]
    assert service["ExecStart"] == [f"{INSTALLED_FARM} {role}"]
    if role == "coordinator":  # the schema migration first: tests/deploy/test_migrations.py runs it
        assert service["ExecStartPre"] == [f"{INSTALLED_FARM} registry upgrade --create"]
    assert service["Restart"] == ["on-failure"]
    assert service["EnvironmentFile"] == [f"/etc/tvm-farm/{role}.env"]
    assert service["User"][0] not in ("root", "0") and "DynamicUser" not in service
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                       "PrivateTmp": "yes"}.items():
        assert service[key] == [value], key
    # TVM's LLVM JIT needs memory that was writable to become executable.
    assert "MemoryDenyWriteExecute" not in service
    # FARM_HOME is the StateDirectory systemd creates (%S = /var/lib) and keeps writable.
    environment = dict(item.split("=", 1) for value in service["Environment"] for item in value.split())
    assert environment["FARM_HOME"] == f"%S/{service['StateDirectory'][0]}"
    assert set(environment) <= (COORDINATOR_ENV if role == "coordinator" else AGENT_ENV) | OTHER_ENV
    assert settings["Install"]["WantedBy"] == ["multi-user.target"]
    if role == "agent":
        assert "PrivateDevices" not in service, "a CUDA agent needs /dev/nvidia*"


@pytest.mark.parametrize("role", sorted(UNITS))
def test_systemd_env_files_use_the_interface(role):
    path = SYSTEMD / f"{role}.env"
    allowed = COORDINATOR_ENV if role == "coordinator" else AGENT_ENV
    active, documented = read_env_file(path), read_env_file(path, commented=True)
    assert set(documented) <= allowed, set(documented) - allowed
    if role == "coordinator":
        assert {"FARM_COORDINATOR_LISTEN", "FARM_REGISTRY_FILE", "FARM_COORDINATOR_TRACKER_LISTEN",
                "FARM_METRICS_LISTEN", "FARM_TOKEN_FILE"} <= set(active)
        # The URL holds the database's password: in a file of its own, not in the environment.
        assert "FARM_REGISTRY" not in active and active["FARM_REGISTRY_FILE"].startswith("/etc/tvm-farm/")
        assert urlsplit(documented["FARM_REGISTRY"]).password is None
        assert {"FARM_TLS_CERT", "FARM_TLS_KEY", "FARM_COORDINATOR_TLS_CLIENT_CA"} <= set(documented)
        assert host_port(active["FARM_COORDINATOR_LISTEN"]) == ("0.0.0.0", 50051)
    else:
        assert {"FARM_COORDINATOR", "FARM_AGENT_DEVICE", "FARM_AGENT_RPC_HOST", "FARM_METRICS_LISTEN",
                "FARM_TOKEN_FILE"} <= set(active)
        assert "CHANGE-ME" in active["FARM_COORDINATOR"] and active["FARM_AGENT_DEVICE"] in ("cpu", "cuda:0")
        assert "FARM_TLS_CA" in documented
    assert "FARM_TOKEN" not in active, "the token goes in its own file, not in the environment file"
    assert host_port(active["FARM_METRICS_LISTEN"])[1] == (9464 if role == "coordinator" else 9465)


@needs_systemd_analyze
def test_systemd_check_rejects_a_misspelt_setting(tmp_path):
    """A misspelt setting is only a warning to verify, which the tests treat as failure."""
    unit = unit_with_stub(UNITS["agent"], tmp_path)
    unit.write_text(unit.read_text().replace("Restart=on-failure", "Restart=on-failure\nRestrat=always"))
    result = systemd_verify(unit)
    assert result.stdout.strip() or result.stderr.strip()


# --------------------------------------------------------------------------- installing for the units
INSTALL = SYSTEMD / "install-venv"


def install_problems(text: str) -> list[str]:
    """Where the install script for the units installs more than the runtime (the test or report
    extra, an editable checkout, apt packages, scripts/setup) or not the coordinator's driver."""
    problems = []
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    roles = dict(re.findall(r"^\s*(coordinator|agent)\) spec=\"([^\"]*)\"", code, re.M))
    if roles != {"coordinator": ".[postgres]", "agent": "."}:
        problems.append(f"installs {roles} by role, not the farm with the postgres extra for the coordinator only")
    installs = re.findall(r"pip install\b([^\n]*)", code)
    if not installs or any(not re.search(r'\s"\$spec"\s*$', line) for line in installs):
        problems.append(f"pip installs something other than the role's spec: {installs}")
    if re.search(r"(?<![\w-])(-e|--editable)(?![\w-])", " ".join(installs)):
        problems.append("an editable install")
    for word, why in (("apt-get", "apt packages"), ("scripts/setup", "scripts/setup (the test extra)"),
                      ("test", "the test extra"), ("report", "the report extra")):
        if re.search(rf"(?<![\w/.-]){re.escape(word)}(?![\w/-])", code):
            problems.append(f"names {why}")
    return problems


def test_systemd_install_is_the_runtime_only():
    assert install_problems(INSTALL.read_text()) == []
    assert subprocess.run(["bash", "-n", str(INSTALL)], capture_output=True, timeout=60).returncode == 0
    # scripts/setup as it was used: the test extra and apt, from the development script.
    setup = (INSTALL.parents[2] / "scripts" / "setup").read_text()
    assert install_problems(setup)
    editable = INSTALL.read_text().replace('pip install --quiet', 'pip install -e --quiet')
    assert install_problems(editable) == ["an editable install"]


@pytest.mark.parametrize("args", [[], ["bogus"], ["coordinator", "agent"]])
def test_systemd_install_refuses_a_bad_role_in_one_line(args, tmp_path):
    """Run as a user runs it; a bad role stops it before anything is made."""
    done = subprocess.run(["bash", str(INSTALL), *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith(")"), line


def test_systemd_recipe_never_runs_scripts_setup():
    """The units and the README's systemd steps name install-venv; scripts/setup (the test extra,
    apt as root) belongs to development boxes."""
    readme = (SYSTEMD.parent / "README.md").read_text()
    section = readme[readme.index("\n## systemd"):readme.index("\n## Kubernetes")]
    code = "\n".join(re.findall(r"```bash\n(.*?)```", section, re.S))
    assert "deploy/systemd/install-venv" in code and "scripts/setup" not in code
    for unit in UNITS.values():
        text = unit.read_text()
        assert "scripts/setup" not in text and "install-venv" in text, unit.name
