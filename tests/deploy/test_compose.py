"""deploy/compose: the official compose-spec JSON schema (as vendored by check-jsonschema), read as
YAML 1.1 and 1.2, before and after interpolating example.env; Docker Compose's own loader where
it is installed; then what the schema cannot see: services, ports, secrets, mounts and the
interface flags agree with each other, and the healthcheck asks a live coordinator.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from farm.local_cluster import free_port

from support.deploy_recipes import (
    AGENT_ENV,
    AGENT_FLAGS,
    COMPOSE_DIR,
    COMPOSE_FILE,
    COORDINATOR_ENV,
    COORDINATOR_FLAGS,
    DASHBOARD,
    DASHBOARD_PROVIDERS,
    DATASOURCES,
    GRAFANA,
    INTERPOLATION,
    PROMETHEUS_CONFIG,
    ROOT,
    farm_services,
    flag_value,
    flags_of,
    host_port,
    interpolate,
    make_certs,
    needs_openssl,
)


def compose_variables(text: str) -> dict[str, str | None]:
    """The variables compose.yaml interpolates: name -> its operator (`:-`, `:?`, ...) or None."""
    found = {}
    for match in INTERPOLATION.finditer(text):
        name = match.group("braced") or match.group("bare")
        if name:
            found.setdefault(name, match.group("op"))
    return found


def compose_schema() -> dict:
    """The compose-spec schema (compose-spec/compose-spec, schema/compose-spec.json, Apache-2.0),
    vendored in the check-jsonschema package."""
    resource = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    return json.loads(resource.read_text())


def compose_errors(document: dict) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(compose_schema(),
                                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def load_yaml_1_2(text: str) -> dict:
    """As Docker Compose reads it (YAML 1.2: 0o400 is a number, `on` a string)."""
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(text)


def test_compose_matches_the_compose_spec_schema(compose_env):
    text = COMPOSE_FILE.read_text()
    assert compose_errors(yaml.safe_load(text)) == []                     # YAML 1.1 (PyYAML)
    assert compose_errors(load_yaml_1_2(text)) == []                      # YAML 1.2, as Compose reads it
    assert compose_errors(yaml.safe_load(interpolate(text, compose_env))) == []  # with example.env filled in


def docker_compose_v2() -> list[str] | None:
    """A Docker Compose v2 command line (`docker compose` or `docker-compose`), if there is one."""
    for argv in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(argv[0]) is None:
            continue
        result = subprocess.run([*argv, "version"], capture_output=True, text=True, timeout=60)
        if result.returncode == 0 and re.search(r"\bv?2\.\d+", result.stdout):
            return argv
    return None


def test_compose_config_by_docker_compose():
    """Docker Compose's own loader (`config` needs no engine), where Compose v2 is installed."""
    argv = docker_compose_v2()
    if argv is None:
        pytest.skip("Docker Compose v2 is not installed (only the docker client is, if anything)")
    result = subprocess.run([*argv, "--env-file", str(COMPOSE_DIR / "example.env"), "-f", str(COMPOSE_FILE),
                             "config", "--quiet"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "DOCKER_HOST": "unix:///nonexistent"})
    assert result.returncode == 0, result.stderr


def test_compose_variables_and_secrets_come_from_example_env(compose, compose_env):
    variables = compose_variables(COMPOSE_FILE.read_text())
    unset = [name for name, op in variables.items() if name not in compose_env and op not in (":-", "-")]
    assert not unset, f"compose.yaml needs variables example.env does not document: {unset}"
    for name, secret in compose["secrets"].items():
        if "file" in secret:  # the TLS files deploy/make-certs writes (tests/deploy/test_tls.py)
            continue
        assert secret.get("environment") in compose_env, f"secret {name} reads an undocumented variable"
    for key in ("POSTGRES_PASSWORD", "FARM_TOKEN", "GRAFANA_ADMIN_PASSWORD", "FARM_REGISTRY_URL"):
        assert "CHANGE-ME" in compose_env[key], f"example.env must hold a placeholder for {key}, not a value"
    assert ".env" in (COMPOSE_DIR / ".gitignore").read_text().split(), "the real .env must be git-ignored"


def test_compose_has_the_issue_services(compose):
    services = compose["services"]
    assert {"postgres", "coordinator", "prometheus", "grafana"} <= set(services)
    roles = {name: service["command"][0] for name, service in farm_services(compose).items()}
    assert sorted(roles.values()) == ["agent", "agent", "coordinator"], roles
    for name, service in farm_services(compose).items():
        if roles[name] == "agent":
            assert "--device" not in service["command"] or flag_value(service["command"], "--device") == "cpu", \
                f"{name} must be a CPU agent"
    for name, service in services.items():
        # The schema takes any string here; Compose does not.
        assert re.fullmatch(r"no|always|unless-stopped|on-failure(:\d+)?", service.get("restart", "no")), name
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    assert services["postgres"]["image"].startswith("postgres:")


def test_compose_farm_services_use_the_interface_and_agree(compose, compose_env):
    services = compose["services"]
    farm = farm_services(compose)
    coordinator = services["coordinator"]
    command = coordinator["command"]
    assert flags_of(command) <= COORDINATOR_FLAGS
    listen_host, grpc_port = host_port(flag_value(command, "--listen"))
    assert listen_host == "0.0.0.0"
    # The tracker is advertised under the coordinator's host name, which agents resolve.
    assert coordinator["hostname"] == "coordinator"
    assert host_port(flag_value(command, "--tracker-listen"))[0] == "0.0.0.0"
    tracker_port = host_port(flag_value(command, "--tracker-listen"))[1]
    published = [str(p).rsplit(":", 1)[-1] for name in farm for p in services[name].get("ports", [])]
    assert str(tracker_port) not in published and "9091" not in published, \
        "the tracker and the agents' RPC servers run any code they are sent: never publish them"
    assert f"{grpc_port}" in published, "the gRPC API is what clients outside compose use"

    # Registry: the postgres service, its user, database and password, from the secret that
    # FARM_REGISTRY_FILE names.
    environment = {**coordinator["environment"]}
    assert set(environment) <= COORDINATOR_ENV and "FARM_REGISTRY" not in environment
    registry_secret = secret_at(coordinator, environment["FARM_REGISTRY_FILE"])
    url = urlsplit(compose_env[compose["secrets"][registry_secret["source"]]["environment"]])
    postgres = services["postgres"]
    assert url.scheme == "postgresql" and url.hostname == "postgres" and url.port in (None, 5432)
    assert url.username == postgres["environment"]["POSTGRES_USER"]
    assert url.path == f"/{postgres['environment']['POSTGRES_DB']}"
    password_secret = secret_at(postgres, postgres["environment"]["POSTGRES_PASSWORD_FILE"])
    assert url.password == compose_env[compose["secrets"][password_secret["source"]]["environment"]]
    assert coordinator["depends_on"]["postgres"]["condition"] == "service_healthy"

    for name, service in farm.items():
        argv = service["command"]
        role = argv[0]
        assert flags_of(argv) <= (COORDINATOR_FLAGS if role == "coordinator" else AGENT_FLAGS), name
        assert set(service.get("environment", {})) <= (COORDINATOR_ENV if role == "coordinator" else AGENT_ENV)
        # The token file is where the compose secret lands, readable by the image's user.
        secret = secret_at(service, flag_value(argv, "--token-file"))
        assert compose["secrets"][secret["source"]]["environment"] == "FARM_TOKEN"
        assert host_port(flag_value(argv, "--metrics-listen"))[0] == "0.0.0.0"
        assert service["build"]["dockerfile"] == "deploy/docker/Dockerfile"
        assert (COMPOSE_DIR / service["build"]["context"]).resolve() == ROOT
        if role == "agent":
            target_host, target_port = host_port(flag_value(argv, "--coordinator"))
            assert target_host == "coordinator" and target_port == grpc_port, name
            assert flag_value(argv, "--rpc-host") == "0.0.0.0", f"{name}: the tracker must reach its RPC server"
            assert service["depends_on"]["coordinator"]["condition"] == "service_healthy"
            assert service["hostname"] == name


def secret_at(service: dict, path: str) -> dict:
    """The service's secret that lands at ``path``, readable by the user the service runs as
    (uid and mode given: Compose copies a secret taken from the environment with them)."""
    found = [s for s in service.get("secrets", []) if isinstance(s, dict) and f"/run/secrets/{s['target']}" == path]
    assert found, f"no secret of the service lands at {path}"
    [secret] = found
    assert secret["uid"] and secret["mode"] in (0o400, "0o400"), secret  # YAML 1.2 reads a number, 1.1 a string
    return secret


def test_compose_secrets_reach_their_readers(compose, compose_env):
    """Each *_FILE setting names where one of the service's secrets lands, owned by the user the
    service runs as; the farm's run as the image's (10001), PostgreSQL's as postgres (999),
    Grafana's as grafana (472)."""
    owners = {"postgres": "999", "grafana": "472"}
    for name, service in compose["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if key.endswith("_FILE"):
                secret = secret_at(service, value)
                assert secret["uid"] == owners.get(name, "10001"), (name, key)
                assert compose["secrets"][secret["source"]]["environment"] in compose_env
    assert "POSTGRES_PASSWORD_FILE" in compose["services"]["postgres"]["environment"]
    assert "GF_SECURITY_ADMIN_PASSWORD__FILE" in compose["services"]["grafana"]["environment"]


def test_compose_references_resolve(compose):
    """What `docker compose config` would refuse: dependencies, volumes and secrets that are
    not declared."""
    services = compose["services"]
    for name, service in services.items():
        depends = service.get("depends_on", [])
        assert set(depends) <= set(services) - {name}, name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in compose["volumes"], f"{name}: volume {source} is not declared"
        for secret in service.get("secrets", []):
            assert (secret["source"] if isinstance(secret, dict) else secret) in compose["secrets"], name
        healthcheck = service.get("healthcheck")
        if healthcheck:
            assert healthcheck["test"][0] in ("CMD", "CMD-SHELL"), name
        for dependency, condition in (depends.items() if isinstance(depends, dict) else []):
            if condition.get("condition") == "service_healthy":
                assert "healthcheck" in services[dependency], f"{name} waits on {dependency}, which has no healthcheck"


def test_compose_bind_mounts_exist_and_grafana_is_provisioned_from_them(compose):
    mounts = {}
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            if source.startswith("."):
                path = (COMPOSE_DIR / source).resolve()
                assert path.exists(), f"{name} mounts {source}, which does not exist"
                mounts[target] = path
    assert mounts["/etc/prometheus/prometheus.yml"] == PROMETHEUS_CONFIG
    assert mounts["/etc/grafana/provisioning"] == GRAFANA / "provisioning"
    providers = yaml.safe_load(DASHBOARD_PROVIDERS.read_text())
    assert providers["apiVersion"] == 1
    [provider] = providers["providers"]
    assert provider["type"] == "file"
    assert mounts[provider["options"]["path"]] == DASHBOARD.parent, "the provider must read the mounted dashboards"
    home = compose["services"]["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert mounts[str(Path(home).parent)] / Path(home).name == DASHBOARD
    # The provisioned datasource is the compose Prometheus, on the port it listens on.
    [datasource] = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    url = urlsplit(datasource["url"])
    assert url.hostname in compose["services"] and url.hostname == "prometheus" and url.port == 9090
    assert any(str(p).endswith(":9090") for p in compose["services"]["prometheus"]["ports"])



def _healthcheck_argv(compose: dict, port: int, ca: Path) -> list[str]:
    """The coordinator's compose healthcheck, run with this venv's Python against `port`, with
    the CA at `ca` in place of the secret's /run/secrets path."""
    test = compose["services"]["coordinator"]["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "/opt/tvm-farm/.venv/bin/python", test
    assert "127.0.0.1:50051" in test[3] and "/run/secrets/farm_tls_ca" in test[3]
    code = test[3].replace("127.0.0.1:50051", f"127.0.0.1:{port}").replace("/run/secrets/farm_tls_ca", str(ca))
    return [sys.executable, *test[2:3], code]


@needs_openssl
def test_compose_healthcheck_asks_a_live_coordinator(compose, tmp_path):
    """The healthcheck command, as written, against a real `farm coordinator` (SQLite, loopback)
    serving TLS with the certificate deploy/make-certs made, as compose starts it; the check as
    it was (a plaintext channel) and one with another CA get no answer from it."""
    farm = Path(sys.executable).with_name("farm")
    if not farm.exists():
        pytest.skip(f"no farm executable beside {sys.executable}")
    made = make_certs(tmp_path / "tls")
    assert made.returncode == 0, made.stderr
    other = make_certs(tmp_path / "other-ca")
    assert other.returncode == 0, other.stderr
    port = free_port()
    argv = _healthcheck_argv(compose, port, tmp_path / "tls" / "ca.crt")
    assert subprocess.run(argv, capture_output=True, timeout=60).returncode != 0, "healthy with no coordinator"
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    for key in ("FARM_REGISTRY", "FARM_REGISTRY_FILE", "FARM_TOKEN", "FARM_TOKEN_FILE", "FARM_TLS_CERT",
                "FARM_TLS_KEY"):
        env.pop(key, None)
    log = (tmp_path / "coordinator.log").open("wb")
    command = compose["services"]["coordinator"]["command"]
    certs = tmp_path / "tls"
    tls = ["--tls-cert", str(certs / "coordinator.crt"), "--tls-key", str(certs / "coordinator.key")]
    assert [flag_value(command, "--tls-cert"), flag_value(command, "--tls-key")] == \
        ["/run/secrets/farm_tls_cert", "/run/secrets/farm_tls_key"]
    coordinator = subprocess.Popen([str(farm), "coordinator", "--listen", f"127.0.0.1:{port}",
                                    "--tracker-listen", "127.0.0.1:0", *tls], env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while True:
            result = subprocess.run(argv, capture_output=True, timeout=60)
            if result.returncode == 0:
                break
            assert coordinator.poll() is None, (tmp_path / "coordinator.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the coordinator never reported SERVING"
            time.sleep(1)
        wrong_ca = _healthcheck_argv(compose, port, tmp_path / "other-ca" / "ca.crt")
        assert subprocess.run(wrong_ca, capture_output=True, timeout=60).returncode != 0, "a CA that signed nothing"
        plaintext = [*argv[:2], argv[2].replace("grpc.secure_channel", "(lambda a, c: grpc.insecure_channel(a))")]
        assert plaintext != argv
        assert subprocess.run(plaintext, capture_output=True, timeout=60).returncode != 0, "plaintext to a TLS port"
    finally:
        coordinator.terminate()
        try:
            coordinator.wait(timeout=60)
        except subprocess.TimeoutExpired:
            coordinator.kill()
            coordinator.wait()
        log.close()


def test_compose_check_rejects_a_broken_copy(compose):
    """A misspelt key fails the schema check."""
    broken = copy.deepcopy(compose)
    broken["services"]["coordinator"]["healthchek"] = broken["services"]["coordinator"].pop("healthcheck")
    assert compose_errors(broken)
