"""No secret in an environment variable, in any recipe's default: passwords, the token and URLs
with a password reach the processes as files (compose secrets, Kubernetes Secret volumes, files
under /etc/tvm-farm), named by *_FILE settings; never in a container's or unit's environment,
nor on a command line."""

from __future__ import annotations

import copy
import re
from urllib.parse import urlsplit

import yaml

from support.deploy_recipes import (
    COMPOSE_DIR,
    COMPOSE_FILE,
    SYSTEMD,
    interpolate,
    k8s_objects,
    pod_template,
    read_compose_env_file,
    read_env_file,
)

# A variable named for a secret that holds it, not a path to it (FARM_TOKEN_FILE, POSTGRES_PASSWORD_FILE
# and Grafana's GF_SECURITY_ADMIN_PASSWORD__FILE name files).
_SECRET_NAME = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|CREDENTIAL|API_KEY")


def secret_problems(where: str, name: str, value: str, known_secrets: set[str] = frozenset()) -> list[str]:
    """What makes ``name=value`` a secret in the environment: a secret's name without _FILE, a URL
    with a password, or one of the known secret values in it."""
    problems = []
    if _SECRET_NAME.search(name) and not name.endswith("_FILE"):
        problems.append(f"{where}: {name} holds a secret (give it as a file: {name}_FILE or a secret's mount)")
    for word in re.findall(r"[a-z][a-z0-9+.-]*://\S+", value):
        try:
            password = urlsplit(word).password
        except ValueError:
            password = None
        if password:
            problems.append(f"{where}: {name} is a URL with a password")
    problems += [f"{where}: {name} holds a secret of example.env" for secret in known_secrets if secret in value]
    return problems


def compose_problems(compose: dict, env: dict[str, str]) -> list[str]:
    secrets = {env[s["environment"]] for s in compose.get("secrets", {}).values() if s.get("environment") in env}
    problems = []
    for name, service in compose["services"].items():
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) for item in environment)
        for key, value in environment.items():
            problems += secret_problems(f"compose {name}", key, interpolate(str(value), env), secrets)
        for arg in service.get("command") or []:
            problems += secret_problems(f"compose {name} command", "argument", interpolate(str(arg), env), secrets)
    return problems


def k8s_problems(objects: list[dict]) -> list[str]:
    problems = []
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob"):
            continue
        spec = pod_template(obj)["spec"]
        for container in (*spec.get("initContainers", []), *spec["containers"]):
            where = f"{obj['kind']}/{obj['metadata']['name']} {container['name']}"
            for env in container.get("env", []):
                if "secretKeyRef" in env.get("valueFrom", {}):
                    problems.append(f"{where}: {env['name']} is taken from a Secret into the environment")
                problems += secret_problems(where, env["name"], str(env.get("value", "")))
            if container.get("envFrom"):
                problems.append(f"{where}: envFrom puts a whole ConfigMap or Secret in the environment")
            for arg in [*container.get("command", []), *container.get("args", [])]:
                problems += secret_problems(where, "argument", str(arg))
    return problems


def systemd_problems() -> list[str]:
    problems = []
    for path in sorted(SYSTEMD.glob("*.env")):
        for key, value in read_env_file(path).items():
            problems += secret_problems(path.name, key, value)
    for unit in sorted(SYSTEMD.glob("*.service")):
        for line in unit.read_text().splitlines():
            key, _, value = line.partition("=")
            if key == "Environment":
                for item in value.split():
                    name, _, setting = item.partition("=")
                    problems += secret_problems(unit.name, name, setting)
            elif key.startswith("ExecStart"):
                problems += secret_problems(unit.name, key, value)
    return problems


def test_compose_passes_no_secret_in_an_environment(compose, compose_env):
    assert compose_problems(compose, compose_env) == []


def test_kubernetes_passes_no_secret_in_an_environment():
    assert k8s_problems(k8s_objects()) == []


def test_systemd_passes_no_secret_in_an_environment():
    assert systemd_problems() == []


def test_secret_checks_reject_the_recipes_as_they_were(compose, compose_env):
    """The recipes before *_FILE: the registry URL with its password and the passwords of
    PostgreSQL and Grafana in compose's environments, the URL from a Secret into the environment
    on Kubernetes, the URL with its password in systemd's environment file."""
    old = copy.deepcopy(compose)
    url = "postgresql://farm:${POSTGRES_PASSWORD:?set it}@postgres:5432/farm"
    old["services"]["coordinator"]["environment"]["FARM_REGISTRY"] = url
    old["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] = "${POSTGRES_PASSWORD}"
    old["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] = "${GRAFANA_ADMIN_PASSWORD}"
    found = compose_problems(old, compose_env)
    assert any("coordinator: FARM_REGISTRY is a URL with a password" in p for p in found), found
    assert any("postgres: POSTGRES_PASSWORD holds a secret" in p for p in found), found
    assert any("grafana: GF_SECURITY_ADMIN_PASSWORD holds a secret" in p for p in found), found
    # A secret's value under an innocent name, or on a command line, is caught by its value.
    sneaky = copy.deepcopy(compose)
    sneaky["services"]["coordinator"]["environment"]["FARM_X"] = "${FARM_TOKEN}"
    sneaky["services"]["coordinator"]["command"] += ["--registry", url]
    assert len(compose_problems(sneaky, compose_env)) >= 3

    objects = copy.deepcopy(k8s_objects())
    coordinator = next(o for o in objects if o["metadata"]["name"] == "farm-coordinator" and o["kind"] == "Deployment")
    pod_template(coordinator)["spec"]["containers"][0]["env"].append(
        {"name": "FARM_REGISTRY", "valueFrom": {"secretKeyRef": {"name": "farm-registry", "key": "url"}}})
    assert k8s_problems(objects) == [
        "Deployment/farm-coordinator coordinator: FARM_REGISTRY is taken from a Secret into the environment"]
    assert secret_problems("coordinator.env", "FARM_REGISTRY", "postgresql://farm:CHANGE-ME@db:5432/farm")
    assert not secret_problems("coordinator.env", "FARM_REGISTRY", "postgresql://farm@db:5432/farm")
    assert not secret_problems("agent.env", "FARM_TOKEN_FILE", "/etc/tvm-farm/token")


def test_example_env_secrets_are_compose_secrets(compose):
    """Every secret example.env holds reaches the services as a compose secret (a file), and the
    compose file interpolates none of them into a service."""
    env = read_compose_env_file(COMPOSE_DIR / "example.env")
    secret_variables = {s["environment"] for s in compose["secrets"].values() if "environment" in s}
    assert {"POSTGRES_PASSWORD", "FARM_TOKEN", "GRAFANA_ADMIN_PASSWORD", "FARM_REGISTRY_URL"} <= secret_variables
    services_text = yaml.safe_dump(yaml.safe_load(COMPOSE_FILE.read_text())["services"])
    interpolated = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", services_text))
    assert not interpolated & secret_variables, sorted(interpolated & secret_variables)
    assert set(secret_variables) <= set(env)
