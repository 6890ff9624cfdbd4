"""deploy/prometheus: `promtool check config` (Debian's prometheus package; skipped without it),
and its targets against the compose services' metrics ports.
"""

from __future__ import annotations

import subprocess

import yaml

from support.deploy_recipes import PROMETHEUS_CONFIG, farm_services, flag_value, host_port, needs_promtool
from support.metrics_contract import TARGET_LABELS


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
