"""deploy/prometheus: `promtool check config` and `check rules`, and the alert rules' own unit tests
by `promtool test rules` (Debian's prometheus package, which scripts/setup installs; skipped,
saying why, without it); the targets against the compose services' metrics ports; the rules'
metric names, labels and label values against the farm's metrics.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import yaml

from support.deploy_recipes import (
    COMPOSE_DIR,
    PROMETHEUS_CONFIG,
    PROMETHEUS_RULES,
    PROMETHEUS_RULES_TESTS,
    ROOT,
    farm_services,
    flag_value,
    host_port,
    needs_promtool,
    promql_nodes,
)
from support.metrics_contract import LABEL_VALUES, SERIES, TARGET_LABELS

# The issues' alerts: a job failing, shards stuck, no agents for a fingerprint, registry errors,
# lease expiries climbing; the coordinator gone; an agent Prometheus lost, most trials failing,
# a job that stopped moving.
ALERTS = {"FarmJobFailed", "FarmShardsStuck", "FarmFingerprintWithoutAgents", "FarmRegistryErrors",
          "FarmCoordinatorDown", "FarmLeaseExpiriesClimbing", "FarmAgentScrapeLost", "FarmTrialErrorRatioHigh",
          "FarmJobStuck"}


@needs_promtool
def test_prometheus_config_passes_promtool():
    result = subprocess.run(["promtool", "check", "config", str(PROMETHEUS_CONFIG)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "SUCCESS" in result.stdout + result.stderr, result.stdout + result.stderr


def test_prometheus_scrapes_every_farm_service_on_its_metrics_port(compose):
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    targets = {t for job in config["scrape_configs"] for sc in job.get("static_configs", []) for t in sc["targets"]}
    expected = {f"{name}:{host_port(flag_value(s['command'], '--metrics-listen'))[1]}"
                for name, s in farm_services(compose).items()}
    assert expected <= targets
    farm_targets = {t for t in targets if not t.startswith("localhost:")}
    assert farm_targets == expected, farm_targets - expected
    static_labels = {k for job in config["scrape_configs"] for sc in job.get("static_configs", [])
                     for k in sc.get("labels", {})}
    assert static_labels <= TARGET_LABELS


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(PROMETHEUS_RULES.read_text())["groups"] for rule in group["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


@needs_promtool
def test_alert_rules_pass_promtool_check():
    result = promtool("check", "rules", str(PROMETHEUS_RULES))
    assert result.returncode == 0 and f"SUCCESS: {len(rules())} rules found" in result.stdout, \
        result.stdout + result.stderr


@needs_promtool
def test_alert_rules_pass_their_unit_tests():
    """deploy/prometheus/rules.test.yml: each alert fires on the series it is for, and not before."""
    result = promtool("test", "rules", str(PROMETHEUS_RULES_TESTS))
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    cases = yaml.safe_load(PROMETHEUS_RULES_TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in cases for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    assert fired == {rule["alert"] for rule in rules()}, "every alert is seen firing in rules.test.yml"


@needs_promtool
def test_alert_rule_tests_fail_on_a_broken_rule(tmp_path):
    """The unit tests can fail: the lease alert's threshold raised, the stuck-shards window dropped."""
    text = PROMETHEUS_RULES.read_text()
    for old, new in ((">= 3", ">= 30"), ("for: 15m", "for: 1h")):
        assert old in text
        (tmp_path / "rules.yml").write_text(text.replace(old, new, 1))
        shutil.copy(PROMETHEUS_RULES_TESTS, tmp_path / "rules.test.yml")
        result = promtool("test", "rules", str(tmp_path / "rules.test.yml"))
        assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr, (old, result.stdout)


def test_alert_rules_cover_the_issue_and_name_real_metrics():
    import promql_parser as p

    by_name = {rule["alert"]: rule for rule in rules()}
    assert set(by_name) == ALERTS
    series = {**SERIES, "up": TARGET_LABELS}  # `up`: Prometheus' own, per target
    for name, rule in by_name.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), name
        selectors = [n for n in promql_nodes(p.parse(rule["expr"])) if isinstance(n, p.VectorSelector)]
        assert selectors, name
        for selector in selectors:
            assert selector.name in series, f"{name}: {selector.name} is no metric the farm or Prometheus serves"
            for matcher in selector.matchers.matchers:
                if matcher.name == "__name__":
                    continue
                assert matcher.name in series[selector.name], f"{name}: {selector.name} has no label {matcher.name}"
                values = LABEL_VALUES.get(selector.name, {})
                if matcher.name in values and matcher.op == p.MatchOp.Equal:
                    assert matcher.value in values[matcher.name], f"{name}: {matcher.name}={matcher.value!r}"
                if matcher.name == "role":
                    assert matcher.value in {"coordinator", "agent"}, name


def markdown_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, spaces as dashes, no punctuation."""
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def test_every_alert_links_its_runbook_section():
    """Each alert's runbook_url is a file of this repository and one of its headings, which says
    what the alert means, how to check and what to do."""
    for rule in rules():
        path, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        runbook = ROOT / path
        assert runbook.is_file() and anchor in markdown_anchors(runbook.read_text()), (rule["alert"], path, anchor)
        section = runbook.read_text().split(f"\n## {rule['alert']}\n", 1)[1].split("\n## ", 1)[0]
        assert all(part in section for part in ("**Means:**", "**Check:**", "**Do:**")), rule["alert"]
    assert "farmjobstuck" in markdown_anchors("## FarmJobStuck\n") and not markdown_anchors("no heading")


def test_prometheus_config_loads_the_rules_compose_mounts(compose):
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    assert config["rule_files"] == [PROMETHEUS_RULES.name], "beside prometheus.yml, as compose mounts both"
    mounts = {}
    for volume in compose["services"]["prometheus"]["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[(COMPOSE_DIR / source).resolve()] = target
    config_dir = mounts[PROMETHEUS_CONFIG].rsplit("/", 1)[0]
    assert mounts[PROMETHEUS_RULES] == f"{config_dir}/{PROMETHEUS_RULES.name}"

