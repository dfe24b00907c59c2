"""docker-compose.yml keeps its secrets in files and its dashboards on this host (read as YAML:
no Docker here)."""

from __future__ import annotations

from typing import Any

import yaml
from django.conf import settings

from tests.support.gateway_process import ROOT


def load(path: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / path).read_text())


def test_grafana_listens_on_this_host_only_and_needs_an_admin_password():
    grafana = load("docker-compose.yml")["services"]["grafana"]
    assert all(port.startswith("127.0.0.1:") for port in grafana["ports"])
    password = grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    assert password.startswith("${GRAFANA_ADMIN_PASSWORD:?"), password  # no default: compose refuses


def test_postgres_credentials_come_from_a_docker_secret():
    compose = load("docker-compose.yml")
    postgres = compose["services"]["postgres"]
    assert "POSTGRES_PASSWORD" not in postgres["environment"]
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert "postgres_password" in postgres["secrets"]
    gateway = compose["services"]["gateway"]
    assert "@" in gateway["environment"]["DATABASE_URL"] and ":gpuportal@" not in gateway["environment"]["DATABASE_URL"]
    assert gateway["environment"]["DATABASE_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert "postgres_password" in gateway["secrets"]
    assert compose["secrets"]["postgres_password"]["file"].startswith("./var/")


def test_prometheus_scrapes_the_gateway_with_its_metrics_token():
    compose = load("docker-compose.yml")
    gateway = compose["services"]["gateway"]
    token_file = gateway["environment"]["GP_METRICS_TOKEN_FILE"]
    assert "gp_metrics_token" in gateway["secrets"]
    assert "gp_metrics_token" in compose["services"]["prometheus"]["secrets"]
    job = next(j for j in load("deploy/prometheus/prometheus.yml")["scrape_configs"] if j["job_name"] == "gpuportal")
    assert job["authorization"] == {"type": "Bearer", "credentials_file": token_file}


def test_every_portal_process_gets_its_django_key_from_a_secret():
    services = load("docker-compose.yml")["services"]
    for name in ("migrate", "gateway", "worker", "beat"):
        environment = services[name]["environment"]
        assert "SECRET_KEY" not in environment and environment["SECRET_KEY_FILE"].startswith("/run/secrets/"), name


def test_the_gateway_may_open_a_descriptor_for_every_connection_it_may_hold():
    gateway = load("docker-compose.yml")["services"]["gateway"]
    command = gateway["command"]
    served = int(command[command.index("--limit-concurrency") + 1])
    waiting = settings.GP_CLIENT_MAX_PENDING
    assert gateway["ulimits"]["nofile"]["soft"] >= served + waiting + 1024  # and room for the engines'
