"""deploy/k8s: every object against Kubernetes' own OpenAPI-derived JSON schemas, strict (no
unknown field), for the oldest and newest versions the recipes target (kubernetes-validate
bundles them); `kubectl kustomize` renders the kustomization; labels, selectors, ports, probes
and Secrets agree. The ServiceMonitor against a subset of its CRD's schema written here (its
real CRD schema is not installable from PyPI: see deploy/README.md), with Kubernetes' own
ObjectMeta and LabelSelector definitions.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support.deploy_recipes import (
    AGENT_ENV,
    AGENT_FLAGS,
    COORDINATOR_ENV,
    COORDINATOR_FLAGS,
    DASHBOARD,
    K8S,
    PROMETHEUS_CONFIG,
    PROMETHEUS_RULES,
    container_args,
    find,
    flag_value,
    flags_of,
    host_port,
    k8s_manifests,
    k8s_objects,
    pod_template,
    selects,
)

K8S_VERSIONS = ("1.27", "latest")  # 1.27: native gRPC probes are GA


def k8s_version(version: str) -> str:
    from kubernetes_validate.utils import latest_version

    return latest_version() if version == "latest" else version


def k8s_errors(obj: dict, version: str) -> str | None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, k8s_version(version), strict=True)
    except kubernetes_validate.ValidationError as err:
        return f"{obj['kind']}/{obj['metadata'].get('name')}: {'.'.join(map(str, err.path))}: {err.message}"
    return None


def duration_schema() -> dict:
    # Prometheus durations as the operator's CRD constrains them (e.g. 30s, 1m30s, 500ms).
    return {"type": "string",
            "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}


def relabel_config_schema() -> dict:
    """The operator's RelabelConfig (monitoring.coreos.com/v1)."""
    actions = ["replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep", "lowercase", "uppercase",
               "keepequal", "dropequal"]
    return {
        "type": "object", "additionalProperties": False,
        "properties": {
            "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
            "separator": {"type": "string"},
            "targetLabel": {"type": "string"},
            "regex": {"type": "string"},
            "modulus": {"type": "integer", "minimum": 0},
            "replacement": {"type": "string"},
            "action": {"enum": actions + ["HashMod" if a == "hashmod" else "LabelMap" if a == "labelmap"
                                          else "LabelDrop" if a == "labeldrop" else "LabelKeep" if a == "labelkeep"
                                          else "KeepEqual" if a == "keepequal" else "DropEqual" if a == "dropequal"
                                          else a.capitalize() for a in actions]},
        },
    }


def prometheus_rule_schema() -> dict:
    """The fields of monitoring.coreos.com/v1 PrometheusRule, from the operator's API (as the
    ServiceMonitor's above): groups of alerting and recording rules."""
    meta = "https://kubernetes.io/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1."
    rule = {
        "type": "object", "additionalProperties": False, "required": ["expr"],
        "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
        "properties": {
            "alert": {"type": "string", "minLength": 1}, "record": {"type": "string", "minLength": 1},
            "expr": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer"}]},
            "for": duration_schema(), "keep_firing_for": duration_schema(),
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }
    group = {
        "type": "object", "additionalProperties": False, "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1}, "interval": duration_schema(),
                       "limit": {"type": "integer"}, "rules": {"type": "array", "items": rule}},
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://kubernetes.io/api/tvm-farm/prometheusrule-monitoring-v1",
        "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": {"$ref": meta + "ObjectMeta"},
            "spec": {"type": "object", "additionalProperties": False,
                     "properties": {"groups": {"type": "array", "items": group}}},
        },
    }


def service_monitor_schema() -> dict:
    """The fields of monitoring.coreos.com/v1 ServiceMonitor that deploy/k8s may use, written
    here from the Prometheus Operator's API documentation: unknown fields are rejected, so a
    misspelt field fails. Metadata and selectors are Kubernetes' own definitions."""
    meta = "https://kubernetes.io/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1."
    endpoint = {
        "type": "object", "additionalProperties": False,
        "anyOf": [{"required": ["port"]}, {"required": ["targetPort"]}],
        "properties": {
            "port": {"type": "string", "minLength": 1},
            "targetPort": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "path": {"type": "string", "pattern": "^/"},
            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
            "interval": duration_schema(),
            "scrapeTimeout": duration_schema(),
            "honorLabels": {"type": "boolean"},
            "honorTimestamps": {"type": "boolean"},
            "params": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
            "relabelings": {"type": "array", "items": relabel_config_schema()},
            "metricRelabelings": {"type": "array", "items": relabel_config_schema()},
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://kubernetes.io/api/tvm-farm/servicemonitor-monitoring-v1",
        "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": {"$ref": meta + "ObjectMeta"},
            "spec": {
                "type": "object", "additionalProperties": False, "required": ["selector", "endpoints"],
                "properties": {
                    "selector": {"$ref": meta + "LabelSelector"},
                    "namespaceSelector": {"type": "object", "additionalProperties": False,
                                          "properties": {"any": {"type": "boolean"},
                                                         "matchNames": {"type": "array", "items": {"type": "string"}}}},
                    "jobLabel": {"type": "string"},
                    "targetLabels": {"type": "array", "items": {"type": "string"}},
                    "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                    "sampleLimit": {"type": "integer", "minimum": 0},
                    "endpoints": {"type": "array", "minItems": 1, "items": endpoint},
                },
            },
        },
    }


def operator_object_errors(obj: dict, schema: dict) -> list[str]:
    import jsonschema
    from kubernetes_validate.utils import latest_version
    from referencing import Registry, Resource

    definitions = (importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
                   / f"v{latest_version()}-local-strict" / "_definitions.json")
    registry = Resource.from_contents(json.loads(definitions.read_text())) @ Registry()
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def service_monitor_errors(obj: dict) -> list[str]:
    return operator_object_errors(obj, service_monitor_schema())


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_objects_match_kubernetes_schemas(version):
    objects = [o for o in k8s_objects() if o["apiVersion"] != "monitoring.coreos.com/v1"]
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "DaemonSet", "Service", "Secret", "Namespace", "NetworkPolicy",
            "PodDisruptionBudget"} <= kinds
    assert [e for e in (k8s_errors(o, version) for o in objects) if e] == []


def test_k8s_service_monitor_matches_its_crd_fields():
    monitor = find("ServiceMonitor", "tvm-farm")
    assert service_monitor_errors(monitor) == []
    # It scrapes the port named in its endpoints on the coordinator's and the agents' Services.
    services = [o for o in k8s_objects() if o["kind"] == "Service"
                and o["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
                and selects(monitor["spec"]["selector"]["matchLabels"], o["metadata"]["labels"])]
    ports = {e["port"] for e in monitor["spec"]["endpoints"]}
    scraped = {s["metadata"]["name"] for s in services if ports & {p["name"] for p in s["spec"]["ports"]}}
    assert scraped == {"farm-coordinator", "farm-agents"}


def test_k8s_service_monitor_sets_the_role_label_the_dashboard_and_rules_use():
    """role="coordinator"/"agent", as prometheus.yml's static labels set it for compose: here the
    relabelling copies each scraped Service's component label into `role`."""
    monitor = find("ServiceMonitor", "tvm-farm")
    roles = {}
    for service in (find("Service", "farm-coordinator"), find("Service", "farm-agents")):
        labels = {"__meta_kubernetes_service_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key): value
                  for key, value in service["metadata"]["labels"].items()}
        for endpoint in monitor["spec"]["endpoints"]:
            for relabel in endpoint.get("relabelings", []):
                if relabel.get("action", "replace").lower() != "replace":
                    continue
                value = relabel.get("separator", ";").join(labels.get(s, "") for s in relabel["sourceLabels"])
                match = re.fullmatch(relabel.get("regex", "(.*)"), value)
                if match:
                    labels[relabel["targetLabel"]] = match.expand(relabel.get("replacement", "$1").replace("$", "\\"))
        roles[service["metadata"]["name"]] = labels.get("role")
    assert roles == {"farm-coordinator": "coordinator", "farm-agents": "agent"}
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    compose_roles = {sc["labels"]["role"] for job in config["scrape_configs"] for sc in job.get("static_configs", [])
                     if "role" in sc.get("labels", {})}
    assert set(roles.values()) == compose_roles
    used = set(re.findall(r'role=\\?"(\w+)\\?"', DASHBOARD.read_text() + PROMETHEUS_RULES.read_text()))
    assert used and used <= set(roles.values()), used


def test_k8s_prometheus_rule_is_rules_yml():
    rule = find("PrometheusRule", "tvm-farm")
    assert operator_object_errors(rule, prometheus_rule_schema()) == []
    assert rule["spec"]["groups"] == yaml.safe_load(PROMETHEUS_RULES.read_text())["groups"], \
        "prometheusrule.yaml's groups must be deploy/prometheus/rules.yml's"
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["fro"] = "5m"
    assert operator_object_errors(broken, prometheus_rule_schema())


def test_k8s_cpu_agents_have_a_disruption_budget():
    budget = find("PodDisruptionBudget", "farm-agent-cpu")
    assert budget["spec"]["maxUnavailable"] == 1 and "minAvailable" not in budget["spec"]
    selector = budget["spec"]["selector"]["matchLabels"]
    covered = [o["metadata"]["name"] for o in k8s_objects() if o["kind"] in ("Deployment", "DaemonSet")
               and selects(selector, pod_template(o)["metadata"]["labels"])]
    assert covered == ["farm-agent-cpu"], covered


def test_k8s_agents_liveness_asks_the_main_loop():
    """Liveness and startup on /healthz of the metrics port (the agent's main loop, agent.metrics),
    readiness on /metrics; restarted only after the loop was stale for several periods."""
    from agent.metrics import LOOP_STALE_AFTER_S

    for obj in (find("Deployment", "farm-agent-cpu"), find("DaemonSet", "farm-agent-gpu")):
        [container] = pod_template(obj)["spec"]["containers"]
        assert "--metrics-listen" in container["args"], "/healthz is served by the metrics server"
        metrics_port = {p["name"] for p in container["ports"]} & {"metrics"}
        for probe in ("livenessProbe", "startupProbe"):
            assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe
        assert metrics_port and container["readinessProbe"]["httpGet"]["path"] == "/metrics"
        liveness = container["livenessProbe"]
        assert liveness["failureThreshold"] >= 2 and liveness["periodSeconds"] * liveness["failureThreshold"] \
            >= LOOP_STALE_AFTER_S / 2
        startup = container["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 300, "TVM's import and the fingerprint"


def test_k8s_kustomization_lists_the_manifests():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and kustomization["kind"] == "Kustomization"
    resources = kustomization["resources"]
    assert all((K8S / r).is_file() for r in resources), resources
    # Everything but the placeholder Secrets and the CRD-dependent ServiceMonitor and PrometheusRule.
    assert set(resources) == set(k8s_manifests()) - {"secrets.example.yaml", "servicemonitor.yaml",
                                                      "prometheusrule.yaml"}
    namespace = kustomization["namespace"]
    for name in resources:
        for obj in k8s_manifests()[name]:
            assert obj["metadata"].get("namespace", namespace) == namespace or obj["kind"] == "Namespace"
    images = {i["name"] for i in kustomization["images"]}
    used = {c["image"].split(":")[0] for o in k8s_objects() if o["kind"] in ("Deployment", "DaemonSet")
            for c in pod_template(o)["spec"]["containers"]}
    assert used == images


def image_pin_problems(kustomization: dict, objects: list[dict], version: str) -> list[str]:
    """Where an image is not pinned to tvm-farm's version: a kustomize image override without
    that tag (or with a digest that is not a sha256 one), a container image of `latest` or none."""
    problems = []
    for image in kustomization["images"]:
        if str(image.get("newTag")) != version:
            problems.append(f"kustomization: {image['name']} is tagged {image.get('newTag')!r}, not {version}")
        if "digest" in image and not re.fullmatch(r"sha256:[0-9a-f]{64}", image["digest"]):
            problems.append(f"kustomization: {image['name']} has the digest {image['digest']!r}")
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        spec = pod_template(obj)["spec"]
        for container in (*spec.get("initContainers", []), *spec["containers"]):
            name, _, tag = container["image"].partition(":")
            if tag != version:
                problems.append(f"{obj['metadata']['name']} {container['name']}: {container['image']}")
    return problems


def test_k8s_images_are_pinned_by_version():
    """tvm-farm's version (pyproject.toml's) in the kustomization and in every container, never
    `latest` (what `latest` names changes under a running Deployment)."""
    tomllib = pytest.importorskip("tomllib")
    version = tomllib.loads((K8S.parents[1] / "pyproject.toml").read_text())["project"]["version"]
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert image_pin_problems(kustomization, k8s_objects(), version) == []
    as_it_was = copy.deepcopy(kustomization)
    for image in as_it_was["images"]:
        image["newTag"] = "latest"
    assert len(image_pin_problems(as_it_was, k8s_objects(), version)) == 2
    assert image_pin_problems(kustomization, k8s_objects(), "0.2.0"), "a version bump must move the pins"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_k8s_kustomize_renders():
    result = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    expected = [o for r in yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
                for o in k8s_manifests()[r]]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rendered) == \
        sorted((o["kind"], o["metadata"]["name"]) for o in expected)
    for obj in rendered:
        assert k8s_errors(obj, "latest") is None, k8s_errors(obj, "latest")
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "tvm-farm"


def test_k8s_coordinator_deployment_and_service():
    deployment, service = find("Deployment", "farm-coordinator"), find("Service", "farm-coordinator")
    pod = pod_template(deployment)
    spec = pod["spec"]
    [container] = spec["containers"]
    args = container["args"]
    assert args[0] == "coordinator" and flags_of(args) <= COORDINATOR_FLAGS
    assert {e["name"] for e in container["env"]} <= COORDINATOR_ENV
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    grpc_port = host_port(flag_value(args, "--listen"))[1]
    assert ports["grpc"] == grpc_port
    assert ports["tracker"] == host_port(flag_value(args, "--tracker-listen"))[1]
    assert ports["metrics"] == host_port(flag_value(args, "--metrics-listen"))[1]
    # Readiness and liveness: Kubernetes' native gRPC probe (plaintext only) on the health
    # service's port: the API's own where it speaks plaintext, --health-listen's where it speaks TLS.
    health_port = host_port(flag_value(args, "--health-listen"))[1] if "--tls-cert" in args else grpc_port
    assert ports["health"] == health_port
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["grpc"]["port"] == health_port, probe
    # The tracker is advertised as the pod's FQDN: hostname.subdomain, with subdomain the
    # headless Service that selects the pod.
    assert spec["subdomain"] == service["metadata"]["name"] and spec["hostname"]
    assert service["spec"]["clusterIP"] == "None"
    assert selects(service["spec"]["selector"], pod["metadata"]["labels"])
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)
    assert spec["enableServiceLinks"] is False, "service links would inject FARM_COORDINATOR_* variables"
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and int(annotations["prometheus.io/port"]) == ports["metrics"]


def test_k8s_secrets_feed_registry_and_token():
    secrets = {o["metadata"]["name"]: o for o in k8s_manifests()["secrets.example.yaml"]}
    for value in (v for s in secrets.values() for v in s["stringData"].values()):
        assert "CHANGE-ME" in value, "the example Secrets hold placeholders only"
    for obj in (o for o in k8s_objects() if o["kind"] in ("Deployment", "DaemonSet")):
        spec = pod_template(obj)["spec"]
        [container] = spec["containers"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        token_path = Path(flag_value(container["args"], "--token-file"))
        mount = mounts[str(token_path.parent)]
        secret_name = volumes[mount["name"]]["secret"]["secretName"]
        assert mount["readOnly"] and token_path.name in secrets[secret_name]["stringData"], obj["metadata"]["name"]
        for env in container.get("env", []):
            if "valueFrom" in env:
                ref = env["valueFrom"]["secretKeyRef"]
                assert ref["key"] in secrets[ref["name"]]["stringData"], env["name"]
        # The writable places of a read-only root filesystem: FARM_HOME and /tmp.
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        farm_home = next(e["value"] for e in container["env"] if e["name"] == "FARM_HOME")
        assert {farm_home, "/tmp"} <= set(mounts)
        assert spec["securityContext"]["runAsUser"] == 10001 and spec["securityContext"]["runAsNonRoot"]
    # The registry's URL: the farm-registry Secret's `url`, a file FARM_REGISTRY_FILE names, in
    # the coordinator and its migration alike.
    spec = pod_template(find("Deployment", "farm-coordinator"))["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for container in (*spec["initContainers"], *spec["containers"]):
        env = {e["name"]: e for e in container["env"]}
        assert "FARM_REGISTRY" not in env, "the URL holds the database's password: a file, not a variable"
        path = Path(env["FARM_REGISTRY_FILE"]["value"])
        mount = {m["mountPath"]: m for m in container["volumeMounts"]}[str(path.parent)]
        assert mount["readOnly"] and volumes[mount["name"]]["secret"]["secretName"] == "farm-registry"
        assert path.name in secrets["farm-registry"]["stringData"], container["name"]


def test_k8s_agents():
    cpu, gpu = find("Deployment", "farm-agent-cpu"), find("DaemonSet", "farm-agent-gpu")
    coordinator_service = find("Service", "farm-coordinator")
    grpc_port = next(p["port"] for p in coordinator_service["spec"]["ports"] if p["name"] == "grpc")
    for obj in (cpu, gpu):
        pod = pod_template(obj)
        [container] = pod["spec"]["containers"]
        args = container["args"]
        assert args[0] == "agent" and flags_of(args) <= AGENT_FLAGS
        assert {e["name"] for e in container.get("env", [])} <= AGENT_ENV
        assert host_port(flag_value(args, "--coordinator")) == (coordinator_service["metadata"]["name"], grpc_port)
        assert flag_value(args, "--rpc-host") == "0.0.0.0"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["tvm-rpc"] == int(flag_value(args, "--rpc-port"))
        assert ports["metrics"] == host_port(flag_value(args, "--metrics-listen"))[1]
        assert int(pod["metadata"]["annotations"]["prometheus.io/port"]) == ports["metrics"]
        assert selects(obj["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
        assert pod["spec"]["enableServiceLinks"] is False
    # CPU agents: no GPU anywhere.
    cpu_container = pod_template(cpu)["spec"]["containers"][0]
    assert "--device" not in cpu_container["args"] and "nvidia.com/gpu" not in json.dumps(cpu_container["resources"])
    assert cpu_container["image"].split(":")[0] == "tvm-farm"
    # GPU agents: on GPU nodes only, one GPU each, which is their cuda:0.
    gpu_spec = pod_template(gpu)["spec"]
    gpu_container = gpu_spec["containers"][0]
    assert any(key.startswith("nvidia.com/gpu") for key in gpu_spec["nodeSelector"])
    assert str(gpu_container["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    assert flag_value(gpu_container["args"], "--device") == "cuda:0"
    assert gpu_container["image"].split(":")[0] == "tvm-farm-cuda"
    assert any(t["key"] == "nvidia.com/gpu" for t in gpu_spec["tolerations"])
    # The agents' metrics Service selects both kinds.
    service = find("Service", "farm-agents")
    assert all(selects(service["spec"]["selector"], pod_template(o)["metadata"]["labels"]) for o in (cpu, gpu))


def test_k8s_network_policies_fence_the_tracker_and_rpc_servers():
    tracker_port = host_port(flag_value(container_args(find("Deployment", "farm-coordinator")), "--tracker-listen"))[1]
    rpc_ports = {int(flag_value(container_args(o), "--rpc-port"))
                 for o in (find("Deployment", "farm-agent-cpu"), find("DaemonSet", "farm-agent-gpu"))}
    fenced = {("farm-coordinator", tracker_port)} | {("farm-agents", port) for port in rpc_ports}
    for name, port in fenced:
        policy = find("NetworkPolicy", name)
        rules = [r for r in policy["spec"]["ingress"] if any(p["port"] == port for p in r["ports"])]
        assert rules and all(r.get("from") for r in rules), f"{name}: port {port} open to everyone"
        for rule in rules:
            for peer in rule["from"]:
                assert set(peer) == {"podSelector"}, "only the farm's own pods"
                assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "tvm-farm"
    # The policies pick the pods that own those ports.
    coordinator = pod_template(find("Deployment", "farm-coordinator"))["metadata"]["labels"]
    assert selects(find("NetworkPolicy", "farm-coordinator")["spec"]["podSelector"]["matchLabels"], coordinator)
    for agent in (find("Deployment", "farm-agent-cpu"), find("DaemonSet", "farm-agent-gpu")):
        assert selects(find("NetworkPolicy", "farm-agents")["spec"]["podSelector"]["matchLabels"],
                       pod_template(agent)["metadata"]["labels"])


def test_k8s_checks_reject_broken_copies():
    """A misspelt probe, a string where a port number goes; a misspelt ServiceMonitor field, a
    bad duration: each fails its check."""
    deployment = copy.deepcopy(find("Deployment", "farm-coordinator"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    assert k8s_errors(deployment, "latest")
    container["readinessProbe"] = container.pop("readinesProbe")
    container["readinessProbe"]["grpc"]["port"] = "grpc"
    assert k8s_errors(deployment, "latest")
    monitor = copy.deepcopy(find("ServiceMonitor", "tvm-farm"))
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    assert service_monitor_errors(monitor)
    monitor["spec"]["endpoints"][0].pop("intervall")
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    assert service_monitor_errors(monitor)
