"""What the tests of deploy/ share: where the recipes are, the interface they may use (the options
and environment of `farm coordinator` and `farm agent`), and readers of their files.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_DIR = DEPLOY / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
K8S = DEPLOY / "k8s"
SYSTEMD = DEPLOY / "systemd"
DOCKERFILES = {"cpu": DEPLOY / "docker" / "Dockerfile", "cuda": DEPLOY / "docker" / "Dockerfile.cuda"}
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
PROMETHEUS_RULES = DEPLOY / "prometheus" / "rules.yml"
PROMETHEUS_RULES_TESTS = DEPLOY / "prometheus" / "rules.test.yml"
GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "farm.json"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yaml"
DASHBOARD_PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "tvm-farm.yaml"


# --------------------------------------------------------------------------- the interface
# What the recipes may use: the options and environment of `farm coordinator` and `farm agent`
# (issue 18's interface plus the options that already existed).
COORDINATOR_FLAGS = {
    "--listen", "--registry", "--tracker", "--tracker-listen", "--metrics-listen", "--token-file",
    "--heartbeat-interval", "--lease-ttl", "--max-attempts", "--records-per-report", "--report-rate",
    "--report-within", "--report-jitter", "--grace", "--ingest-process", "--no-ingest-process", "--json",
    "--health-listen", "--log-format", "--log-level", "--tls-cert", "--tls-key", "--tls-client-ca",
}
AGENT_FLAGS = {
    "--coordinator", "--target", "--device", "--build-workers", "--rpc-host", "--rpc-port",
    "--metrics-listen", "--token-file", "--grace", "--log-format", "--log-level", "--allow-insecure-rpc",
    "--tls-ca", "--tls-cert", "--tls-key",
}
COMMON_ENV = {"FARM_HOME", "FARM_TOKEN", "FARM_TOKEN_FILE", "FARM_METRICS_LISTEN", "FARM_LOG_FORMAT", "FARM_LOG_LEVEL"}
COORDINATOR_ENV = COMMON_ENV | {
    "FARM_COORDINATOR_LISTEN", "FARM_REGISTRY", "FARM_REGISTRY_FILE", "FARM_COORDINATOR_TRACKER",
    "FARM_COORDINATOR_TRACKER_LISTEN",
    "FARM_COORDINATOR_INGEST_PROCESS", "FARM_TLS_CERT", "FARM_TLS_KEY", "FARM_COORDINATOR_TLS_CLIENT_CA",
    "FARM_COORDINATOR_HEALTH_LISTEN", "FARM_COORDINATOR_HEARTBEAT_INTERVAL", "FARM_COORDINATOR_LEASE_TTL",
    "FARM_COORDINATOR_MAX_ATTEMPTS", "FARM_COORDINATOR_RECORDS_PER_REPORT", "FARM_COORDINATOR_REPORT_RATE",
    "FARM_COORDINATOR_REPORT_WITHIN", "FARM_COORDINATOR_REPORT_JITTER", "FARM_COORDINATOR_GRACE",
}
AGENT_ENV = COMMON_ENV | {
    "FARM_COORDINATOR", "FARM_AGENT_DEVICE", "FARM_AGENT_BUILD_WORKERS", "FARM_AGENT_RPC_HOST", "FARM_AGENT_RPC_PORT",
    "FARM_TLS_CA", "FARM_TLS_CERT", "FARM_TLS_KEY", "FARM_AGENT_TARGET", "FARM_AGENT_GRACE",
    "FARM_AGENT_ALLOW_INSECURE_RPC",
}
# Read by the farm without an option of its own: the data directory. Every other FARM_ variable
# a recipe sets is an option's (`farm ROLE --help` names it).
ENV_WITHOUT_OPTION = {"FARM_HOME"}

# Set by the CUDA image for TVM itself, not by the farm.
OTHER_ENV = {"PATH", "HOME", "PYTHONUNBUFFERED", "CUDA_HOME", "TVM_CUDA_COMPILE_MODE", "XDG_CACHE_HOME"}


# --------------------------------------------------------------------------- readers
def load_yaml_documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def read_env_file(path: Path, *, commented: bool = False) -> dict[str, str]:
    """KEY=VALUE lines (systemd EnvironmentFile and compose .env syntax); with `commented`,
    also the `#KEY=VALUE` lines that document optional settings."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if commented and re.match(r"#[A-Z_][A-Z0-9_]*=", line):
            line = line[1:]
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), f"{path.name}: not KEY=VALUE: {line!r}"
        out[key] = value
    return out


# Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error}, $VAR and $$.
INTERPOLATION = re.compile(r"\$\$|\$\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
                           r"|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation of ${VAR}, ${VAR:-default}, ${VAR:?error}, $VAR and $$ (in
    compose.yaml, and in .env's values from the lines above them)."""
    def replace(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group("braced") or match.group("bare")
        op, arg = match.group("op"), match.group("arg")
        value = env.get(name)
        if op in (":-", "-"):
            return value if value or (op == "-" and value is not None) else arg
        if op in (":?", "?") and not value:
            raise AssertionError(f"compose.yaml needs {name}: {arg}")
        assert value is not None, f"${name} is used, and example.env does not set it"
        return value

    return INTERPOLATION.sub(replace, text)


def read_compose_env_file(path: Path) -> dict[str, str]:
    """A compose .env file as Compose reads it: each value interpolated from the lines above."""
    env: dict[str, str] = {}
    for key, value in read_env_file(path).items():
        env[key] = interpolate(value, env)
    return env


def flags_of(argv: list[str]) -> set[str]:
    return {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}


def flag_value(argv: list[str], flag: str) -> str:
    index = argv.index(flag)
    return argv[index + 1]


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def farm_services(compose: dict) -> dict[str, dict]:
    """The services running `farm`: their command's first word is the role."""
    return {name: service for name, service in compose["services"].items()
            if service.get("command") and service["command"][0] in ("coordinator", "agent")}


def k8s_manifests() -> dict[str, list[dict]]:
    return {path.name: load_yaml_documents(path) for path in sorted(K8S.glob("*.yaml"))
            if path.name != "kustomization.yaml"}


def k8s_objects() -> list[dict]:
    return [doc for docs in k8s_manifests().values() for doc in docs]


def find(kind: str, name: str) -> dict:
    [found] = [o for o in k8s_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pod_template(obj: dict) -> dict:
    return obj["spec"]["template"]


def container_args(obj: dict) -> list[str]:
    [container] = pod_template(obj)["spec"]["containers"]
    return container["args"]


# --------------------------------------------------------------------------- PromQL
def promql_nodes(node):
    """Every node of a promql_parser expression tree, depth first."""
    import promql_parser as p

    yield node
    children = []
    if isinstance(node, p.MatrixSelector):
        children = [node.vector_selector]
    elif isinstance(node, (p.AggregateExpr,)):
        children = [node.expr] + ([node.param] if node.param is not None else [])
    elif isinstance(node, p.Call):
        children = list(node.args)
    elif isinstance(node, p.BinaryExpr):
        children = [node.lhs, node.rhs]
    elif isinstance(node, (p.ParenExpr, p.UnaryExpr, p.SubqueryExpr)):
        children = [node.expr]
    for child in children:
        yield from promql_nodes(child)


# --------------------------------------------------------------------------- TLS
MAKE_CERTS = DEPLOY / "make-certs"


def make_certs(directory: Path, *args: str) -> subprocess.CompletedProcess:
    """deploy/make-certs, run as a user runs it, into ``directory``."""
    return subprocess.run(["bash", str(MAKE_CERTS), str(directory), *args], capture_output=True, text=True,
                          timeout=120)


needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None,
                                   reason="the openssl CLI is not installed (Debian package openssl)")


# --------------------------------------------------------------------------- tools
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool is not installed (Debian package prometheus)")


def parse_dockerfile(path: Path):
    import dockerfile

    return dockerfile.parse_file(str(path))


def dockerfile_env(commands) -> dict[str, str]:
    env = {}
    for c in commands:
        if c.cmd == "ENV":
            env.update(dict(zip(c.value[::2], c.value[1::2], strict=True)))
    return env


def image_python(commands) -> str:
    """The X.Y of the Python the image's venv is made with (`pythonX.Y -m venv`)."""
    runs = " ".join(c.value[0] for c in commands if c.cmd == "RUN")
    [version] = set(re.findall(r"\bpython(3\.\d+) -m venv\b", runs))
    return version


# A lock's line: the pin, the sha256 of each wheel of it the image's Python could take, the
# wheel pip chose (deploy/docker/lock writes them so).
LOCK_LINE = re.compile(r"([A-Za-z0-9._-]+)==(\S+)((?: --hash=sha256:[0-9a-f]{64})+)  # (\S+\.whl)")
WHEELS = ROOT / "deploy" / "docker" / "wheels"


def lock_path(python: str) -> Path:
    return ROOT / "deploy" / "docker" / f"requirements-py{python.replace('.', '')}.txt"


def local_wheels(pins: dict[str, tuple[str, str]]) -> set[str]:
    """The wheels a lock names that deploy/docker/wheels holds: the index has not got them."""
    return {wheel for _, wheel in pins.values() if (WHEELS / wheel).is_file()}


def read_lock(path: Path) -> tuple[str, dict[str, tuple[str, str]]]:
    """(the Python it was resolved for, {normalized name: (version, wheel file)})."""
    from packaging.utils import canonicalize_name

    text = path.read_text()
    [python] = re.findall(r"^# python (3\.\d+)$", text, re.M)
    pins = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = LOCK_LINE.fullmatch(line)
            assert match, f"{path.name}: not `name==version --hash=sha256:H...  # wheel`: {line!r}"
            pins[canonicalize_name(match[1])] = (match[2], match[4])
    return python, pins
