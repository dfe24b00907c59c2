"""The Prometheus alert rules that ship in deploy/: promtool finds them valid and their unit tests
pass (each alert fires on series that should fire it and not on healthy ones), Prometheus and
compose load them, and the Grafana dashboard graphs each alert's expression."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import yaml

from tests.support.gateway_process import ROOT

RULES = ROOT / "deploy/prometheus/alerts.yml"
RULE_TESTS = ROOT / "deploy/prometheus/alerts_test.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert shutil.which("promtool"), "promtool is missing: scripts/ensure-system.sh installs it (Debian's prometheus)"
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120,
                          cwd=RULES.parent)


def alerts() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def test_promtool_finds_the_rules_valid():
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_rules_unit_tests_pass():
    tested = promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_each_alert_is_tested_firing_and_quiet():
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert set(alerts()) == firing, "an alert with no test that fires it, or a test of no alert"
    assert set(alerts()) <= quiet, "an alert never shown quiet"


def test_each_alert_says_how_bad_it_is_and_what_it_means():
    for name, rule in alerts().items():
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name


def test_prometheus_loads_the_rules_and_compose_mounts_them_beside_its_config():
    assert "alerts.yml" in yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())["rule_files"]
    volumes = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["prometheus"]["volumes"]
    assert "./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in volumes
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in volumes
    checked = promtool("check", "config", "--syntax-only", "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboard_graphs_each_alerts_expression_and_keeps_its_panels():
    dashboard = json.loads((ROOT / "deploy/grafana/gpuportal.json").read_text())
    panels = dashboard["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    titles = {panel["title"] for panel in panels}
    assert {"Queue depth by tier", "Engine KV cache usage", "Queue wait p50 / p95 by tier"} <= titles
    described = " ".join(panel.get("description", "") for panel in panels)
    for name in alerts():
        assert f"Alert {name}" in described, name
