"""TLS on by default in compose and Kubernetes: deploy/make-certs (the openssl CLI) makes a CA,
the coordinator's certificate and a client's, which the farm's own checks accept; every
coordinator the recipes start serves TLS from the mounted files, every agent verifies it with the
mounted CA, the compose healthcheck speaks TLS (test_compose.py runs it against a live
coordinator), and the compose port is published on loopback only.
"""

from __future__ import annotations

import copy
import datetime as dt
import stat
from pathlib import Path, PurePosixPath

from support.deploy_recipes import (
    COMPOSE_DIR,
    container_args,
    farm_services,
    find,
    flag_value,
    host_port,
    interpolate,
    k8s_manifests,
    k8s_objects,
    make_certs,
    needs_openssl,
    pod_template,
)

FILES = ("ca.crt", "ca.key", "coordinator.crt", "coordinator.key", "client.crt", "client.key")


def load_certificate(path: Path):
    from cryptography import x509

    return x509.load_pem_x509_certificate(path.read_bytes())


def dns_and_ip_names(cert) -> set[str]:
    from cryptography import x509

    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {*names.get_values_for_type(x509.DNSName), *map(str, names.get_values_for_type(x509.IPAddress))}


def recipe_coordinator_hosts(compose: dict) -> set[str]:
    """The names the recipes reach the coordinator's API by: the agents' --coordinator hosts and
    the compose healthcheck's address."""
    hosts = {host_port(flag_value(s["command"], "--coordinator"))[0] for s in farm_services(compose).values()
             if s["command"][0] == "agent"}
    hosts |= {host_port(flag_value(container_args(o), "--coordinator"))[0] for o in k8s_objects()
              if o["kind"] in ("Deployment", "DaemonSet") and container_args(o)[0] == "agent"}
    return hosts | {"127.0.0.1"}


@needs_openssl
def test_make_certs_writes_a_ca_a_coordinator_and_a_client(tmp_path, compose):
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    from foundation.wire.certificates import PemFile, check_ca, check_pair

    done = make_certs(tmp_path / "tls", "--name", "coord.example.internal", "--name", "10.0.0.7")
    assert done.returncode == 0, done.stderr
    directory = tmp_path / "tls"
    assert sorted(p.name for p in directory.iterdir()) == sorted(FILES)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in FILES:
        assert stat.S_IMODE((directory / name).stat().st_mode) == (0o600 if name.endswith(".key") else 0o644), name
    ca, server, client = (load_certificate(directory / f"{n}.crt") for n in ("ca", "coordinator", "client"))
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for cert, usage in ((server, ExtendedKeyUsageOID.SERVER_AUTH), (client, ExtendedKeyUsageOID.CLIENT_AUTH)):
        cert.verify_directly_issued_by(ca)
        assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [usage]
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    names = dns_and_ip_names(server)
    assert {"coordinator", "localhost", "127.0.0.1", "coord.example.internal", "10.0.0.7"} <= names
    assert recipe_coordinator_hosts(compose) <= names, "every name the recipes dial the coordinator by"
    # An address given is named as an IP address, not as a host name.
    assert "10.0.0.7" in map(str, server.extensions.get_extension_for_class(x509.SubjectAlternativeName)
                             .value.get_values_for_type(x509.IPAddress))
    # What the farm itself checks before gRPC gets the files: the coordinator would start with them.
    now = dt.datetime.now(dt.timezone.utc)
    pem = {name: PemFile(f"--{name}", directory / name, (directory / name).read_bytes()) for name in FILES}
    check_ca(pem["ca.crt"], "the coordinator's", now)
    check_pair(pem["coordinator.crt"], pem["coordinator.key"], now)
    check_pair(pem["client.crt"], pem["client.key"], now)


@needs_openssl
def test_make_certs_overwrites_nothing_and_says_why_in_one_line(tmp_path):
    directory = tmp_path / "tls"
    assert make_certs(directory).returncode == 0
    before = {name: (directory / name).read_bytes() for name in FILES}
    again = make_certs(directory)
    assert again.returncode == 2
    [line] = again.stderr.splitlines()
    assert line.startswith("error: ") and "exists" in line and line.endswith(")"), line
    assert {name: (directory / name).read_bytes() for name in FILES} == before
    for args in ((), ("--days", "0"), ("--name", "two words"), ("--owner", "tvm-farm"), ("--bogus",)):
        done = make_certs(tmp_path / "other", *args) if args else make_certs(tmp_path / "a", str(tmp_path / "b"))
        assert done.returncode == 2, (args, done.stderr)
        [line] = done.stderr.splitlines()
        assert line.startswith("error: ") and line.endswith(")"), line
    assert not (tmp_path / "other").exists() and not (tmp_path / "a").exists()


# --------------------------------------------------------------------------- compose
def compose_tls_problems(compose: dict, env: dict[str, str]) -> list[str]:
    """Where the compose file leaves gRPC in plaintext or published beyond loopback."""
    problems = []
    secrets = compose["secrets"]
    for name, service in farm_services(compose).items():
        argv = service["command"]
        landed = {f"/run/secrets/{s['target'] if isinstance(s, dict) else s}": s["source"] if isinstance(s, dict)
                  else s for s in service.get("secrets", [])}
        if argv[0] == "coordinator":
            for flag, made in (("--tls-cert", "coordinator.crt"), ("--tls-key", "coordinator.key")):
                path = flag_value(argv, flag) if flag in argv else None
                if path not in landed:
                    problems.append(f"{name}: {flag} names no secret of the service")
                elif PurePosixPath(secrets[landed[path]].get("file", "")).name != made:
                    problems.append(f"{name}: {flag} is not deploy/make-certs' {made}")
            test = " ".join(service["healthcheck"]["test"])
            if "ssl_channel_credentials" not in test or "insecure_channel" in test:
                problems.append(f"{name}: the healthcheck does not speak TLS")
            elif not any(path in test and secrets[source].get("file", "").endswith("/ca.crt")
                         for path, source in landed.items()):
                problems.append(f"{name}: the healthcheck does not verify with the mounted CA")
            for port in service.get("ports", []):
                address = interpolate(str(port), env).rsplit(":", 2)
                if len(address) < 3 or address[0] not in ("127.0.0.1", "[::1]"):
                    problems.append(f"{name}: port {port} is published beyond loopback")
        else:
            ca = (service.get("environment") or {}).get("FARM_TLS_CA") or \
                (flag_value(argv, "--tls-ca") if "--tls-ca" in argv else None)
            if ca not in landed or not secrets[landed[ca]].get("file", "").endswith("/ca.crt"):
                problems.append(f"{name}: no CA to verify the coordinator with (FARM_TLS_CA or --tls-ca)")
    return problems


def test_compose_serves_tls_and_agents_verify_it(compose, compose_env):
    assert compose_tls_problems(compose, compose_env) == []
    files = {PurePosixPath(s["file"]) for s in compose["secrets"].values() if "file" in s}
    assert len({f.parent for f in files}) == 1 and {f.name for f in files} <= set(FILES)
    assert (COMPOSE_DIR / "tls").name in ((COMPOSE_DIR / ".gitignore").read_text().replace("/", " ").split()), \
        "the certificates and keys deploy/make-certs writes beside compose.yaml stay out of git"


def test_compose_tls_check_rejects_the_file_as_it_was(compose, compose_env):
    """No TLS flags, a plaintext healthcheck, no CA for the agents, 50051 on every interface."""
    old = copy.deepcopy(compose)
    coordinator = old["services"]["coordinator"]
    for flag in ("--tls-cert", "--tls-key"):
        index = coordinator["command"].index(flag)
        del coordinator["command"][index:index + 2]
    coordinator["healthcheck"]["test"][3] = "grpc.insecure_channel('127.0.0.1:50051')"
    coordinator["ports"] = ["50051:50051"]
    for name, service in farm_services(old).items():
        if name != "coordinator":
            service["environment"] = {"FARM_TOKEN_FILE": "/run/secrets/farm_token"}
    problems = compose_tls_problems(old, compose_env)
    assert len(problems) == 6, problems
    opened = copy.deepcopy(compose)
    assert compose_tls_problems(opened, {**compose_env, "GRPC_PUBLISH_ADDRESS": "0.0.0.0"}) == [
        "coordinator: port ${GRPC_PUBLISH_ADDRESS:-127.0.0.1}:50051:50051 is published beyond loopback"]


# --------------------------------------------------------------------------- Kubernetes
def mounted_secret_items(spec: dict, container: dict, path: str) -> tuple[str, str | None] | None:
    """(Secret name, key) that the file ``path`` of ``container`` is, or None where no Secret
    is mounted there."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    file = PurePosixPath(path)
    for mount in container.get("volumeMounts", []):
        secret = volumes[mount["name"]].get("secret")
        if secret and mount["mountPath"] == str(file.parent):
            items = {i["path"]: i["key"] for i in secret.get("items", [])}
            return secret["secretName"], items.get(file.name) if items else file.name
    return None


def k8s_tls_problems(objects: list[dict]) -> list[str]:
    problems = []
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        spec = pod_template(obj)["spec"]
        [container] = spec["containers"]
        args, where = container["args"], f"{obj['kind']}/{obj['metadata']['name']}"
        if args[0] == "coordinator":
            for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key")):
                found = mounted_secret_items(spec, container, flag_value(args, flag)) if flag in args else None
                if found != ("farm-tls", key):
                    problems.append(f"{where}: {flag} is not the farm-tls Secret's {key}")
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                port = container[probe]["grpc"]["port"]
                if port == host_port(flag_value(args, "--listen"))[1]:
                    problems.append(f"{where}: the {probe} asks the TLS port in plaintext")
        else:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            ca = env.get("FARM_TLS_CA") or (flag_value(args, "--tls-ca") if "--tls-ca" in args else None)
            if ca is None or mounted_secret_items(spec, container, ca) != ("farm-tls", "ca.crt"):
                problems.append(f"{where}: no CA to verify the coordinator with (FARM_TLS_CA from farm-tls)")
    return problems


def test_kubernetes_serves_tls_and_agents_verify_it():
    assert k8s_tls_problems(k8s_objects()) == []
    secrets = {o["metadata"]["name"]: o for o in k8s_manifests()["secrets.example.yaml"]}
    assert {"tls.crt", "tls.key", "ca.crt"} <= set(secrets["farm-tls"]["stringData"])
    # Agents get the CA alone, never the coordinator's key.
    for obj in (find("Deployment", "farm-agent-cpu"), find("DaemonSet", "farm-agent-gpu")):
        volumes = pod_template(obj)["spec"]["volumes"]
        tls = next(v for v in volumes if v.get("secret", {}).get("secretName") == "farm-tls")
        assert [i["key"] for i in tls["secret"]["items"]] == ["ca.crt"]


def test_kubernetes_tls_check_rejects_the_manifests_as_they_were():
    objects = copy.deepcopy(k8s_objects())
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        container = pod_template(obj)["spec"]["containers"][0]
        for flag in ("--tls-cert", "--tls-key", "--health-listen"):
            if flag in container["args"]:
                index = container["args"].index(flag)
                del container["args"][index:index + 2]
        container["env"] = [e for e in container["env"] if e["name"] != "FARM_TLS_CA"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if "grpc" in container.get(probe, {}):
                container[probe]["grpc"]["port"] = 50051
    problems = k8s_tls_problems(objects)
    assert len(problems) == 2 + 3 + 2, problems
