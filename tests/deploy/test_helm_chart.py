"""The Helm chart in deploy/helm/gpuportal, checked offline: `helm lint` and `helm template` with its
default values and the two value files in its ci/ folder, every rendered manifest valid against
Kubernetes' own schemas (kubernetes-validate, for KUBERNETES_VERSION), and the facts a cluster
relies on: one beat, a gateway that drains before it is killed, migrations before the pods, the
same processes as docker-compose.yml, Sentinel and an existing Secret wired through.

ServiceMonitor is a CRD (Prometheus Operator's) with no schema in kubernetes-validate: its fields
are checked here by hand against what the gateway serves."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.conf import settings
from django.test import Client

from fairness.gateway.asgi import _EXIT_MARGIN_SECONDS
from fairness.management.commands.add_replica import Command as AddReplica
from tests.support.gateway_process import ROOT

CHART = ROOT / "deploy/helm/gpuportal"
# The oldest Kubernetes the chart is checked against (its Chart.yaml asks for 1.27 or later; every
# API it renders is GA there): a cluster at least this new takes the manifests as rendered.
KUBERNETES_VERSION = "1.33"
VALUE_FILES = [None, "ci/sentinel-values.yaml", "ci/external-values.yaml"]
PORTAL_KINDS = ("Deployment", "Job")
CUSTOM_KINDS = {"ServiceMonitor"}  # CRDs: no schema in kubernetes-validate, checked below


def helm_binary() -> str:
    """scripts/ensure-helm.sh's copy, else one on PATH. Missing is a failure, not a skip: CI
    installs it (scripts/ensure-system.sh)."""
    local = ROOT / "var/tools/bin/helm"
    found = str(local) if os.access(local, os.X_OK) else shutil.which("helm")
    assert found, "helm is missing: scripts/ensure-helm.sh installs it in var/tools/bin (ensure-system.sh calls it)"
    return found


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=120, cwd=CHART,
                          env={**os.environ, "HELM_CACHE_HOME": str(ROOT / "var/helm/cache"),
                               "HELM_CONFIG_HOME": str(ROOT / "var/helm/config"),
                               "HELM_DATA_HOME": str(ROOT / "var/helm/data")})


def template_args(values: str | None, *sets: str) -> list[str]:
    args = ["template", "gp", ".", "--namespace", "llm", "--kube-version", f"{KUBERNETES_VERSION}.0"]
    if values:
        args += ["-f", values]
    for assignment in sets:
        args += ["--set", assignment]
    return args


@functools.cache
def render(values: str | None = None, *sets: str) -> tuple[dict[str, Any], ...]:
    rendered = helm(*template_args(values, *sets))
    assert rendered.returncode == 0, rendered.stderr
    return tuple(doc for doc in yaml.safe_load_all(rendered.stdout) if doc)


def one(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def containers(docs: tuple[dict[str, Any], ...]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(manifest, container) for every portal process: the Deployments and the Jobs."""
    return [(d, c) for d in docs if d["kind"] in PORTAL_KINDS for c in d["spec"]["template"]["spec"]["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("values", VALUE_FILES)
def test_helm_lint_finds_nothing_wrong(values: str | None):
    files = ["-f", values] if values else []
    linted = helm("lint", ".", "--strict", "--kube-version", f"{KUBERNETES_VERSION}.0", *files)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "0 chart(s) failed" in linted.stdout


@pytest.mark.parametrize("values", VALUE_FILES)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(values: str | None):
    docs = render(values)
    checked = set()
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {'.'.join(map(str, error.path))}: {error.message}")
        checked.add(doc["kind"])
    assert {"Deployment", "Service", "PodDisruptionBudget", "Job"} <= checked


def test_the_validator_refuses_a_manifest_kubernetes_would():
    deployment = json.loads(json.dumps(one(render(), "Deployment", "gp-gpuportal-beat")))
    deployment["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("values", VALUE_FILES)
def test_beat_runs_once_and_stops_before_its_successor_starts(values: str | None):
    beat = one(render(values), "Deployment", "gp-gpuportal-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert one(render(values, "beat.replicas=3"), "Deployment", "gp-gpuportal-beat")["spec"]["replicas"] == 1


@pytest.mark.parametrize("grace", [30, 90])
def test_the_gateway_drains_before_it_is_killed(grace: int):
    gateway = one(render(None, f"gateway.shutdownGraceSeconds={grace}"), "Deployment", "gp-gpuportal-gateway")
    pod = gateway["spec"]["template"]["spec"]
    [container] = pod["containers"]
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep" and int(sleep[1]) >= 3, "the endpoints controller needs a moment to drop the pod"
    assert int(env_of(container)["GP_SHUTDOWN_GRACE_SECONDS"]) == grace
    # The kubelet counts the grace period from the preStop hook's start: the sleep, the drain, and
    # the time the process may still take to end after it (fairness/gateway/asgi.py).
    assert pod["terminationGracePeriodSeconds"] > int(sleep[1]) + grace + _EXIT_MARGIN_SECONDS
    assert gateway["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_the_gateway_is_ready_on_a_path_served_without_the_database_for_any_host():
    """The readiness probe's path answers a kubelet (a pod IP as the host) without the database:
    this test has none (no `db` fixture), so a query would fail it."""
    gateway = one(render(), "Deployment", "gp-gpuportal-gateway")
    [container] = gateway["spec"]["template"]["spec"]["containers"]
    probe = container["readinessProbe"]["httpGet"]
    assert probe["port"] == "http" and container["ports"][0]["name"] == "http"
    answered = Client(HTTP_HOST="pod-17.invalid:8000").get(probe["path"])
    assert answered.status_code == 200
    assert Client(HTTP_HOST="pod-17.invalid:8000").get("/capacity/").status_code == 400  # a page would not do


def test_the_migrations_run_once_before_the_pods_with_the_secret_already_there():
    docs = render("ci/sentinel-values.yaml")
    job = one(docs, "Job", "gp-gpuportal-migrate")
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # What the Job reads must exist before it: hooks of a lower weight.
    for kind, name in (("Secret", "gp-gpuportal-secrets"), ("ServiceAccount", "gp-gpuportal")):
        hook = one(docs, kind, name)["metadata"]["annotations"]
        assert "pre-install" in hook["helm.sh/hook"]
        assert int(hook["helm.sh/hook-weight"]) < int(annotations["helm.sh/hook-weight"]), kind


def test_the_processes_are_those_docker_compose_runs():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    docs = render()
    commands = {d["metadata"]["name"].removeprefix("gp-gpuportal-"): c["command"] for d, c in containers(docs)}
    expected = {"gateway": "gateway", "worker": "worker", "batch-worker": "batch-worker", "beat": "beat",
                "migrate": "migrate"}
    for chart_name, compose_name in expected.items():
        wanted = [part.replace("${GATEWAY_WORKERS:-4}", "4") for part in compose[compose_name]["command"]]
        assert commands[chart_name] == wanted, chart_name


def test_the_batch_worker_takes_the_queue_batches_are_sent_to():
    batch_worker = one(render(), "Deployment", "gp-gpuportal-batch-worker")
    command = batch_worker["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--queues") + 1] == settings.CELERY_TASK_ROUTES["fairness.run_batches"]["queue"]
    worker = one(render(), "Deployment", "gp-gpuportal-worker")
    assert "--queues" not in worker["spec"]["template"]["spec"]["containers"][0]["command"]


def test_sentinel_values_reach_every_portal_process():
    for doc, container in containers(render("ci/sentinel-values.yaml")):
        env = env_of(container)
        assert env["REDIS_SENTINELS"] == ("redis-sentinel-0.cache.svc:26379,redis-sentinel-1.cache.svc:26379,"
                                          "redis-sentinel-2.cache.svc:26379"), doc["metadata"]["name"]
        assert env["REDIS_SENTINEL_MASTER"] == "gpuportal"
        assert env["REDIS_URL_FILE"] == "/run/secrets/gpuportal/redis-url"  # its password stays in the Secret
    for _, container in containers(render()):
        assert "REDIS_SENTINELS" not in env_of(container)


def test_sentinel_hosts_without_a_master_are_refused():
    refused = helm(*template_args(None, "redis.sentinel.hosts[0]=sentinel:26379"))
    assert refused.returncode != 0
    assert "redis.sentinel.master" in refused.stderr


def test_an_existing_secret_is_read_and_none_rendered():
    docs = render("ci/external-values.yaml")
    assert [d for d in docs if d["kind"] == "Secret"] == []
    keys = yaml.safe_load((CHART / "ci/external-values.yaml").read_text())["existingSecret"]["keys"]
    for doc, container in containers(docs):
        volumes = {v["name"]: v for v in doc["spec"]["template"]["spec"]["volumes"]}
        secret = volumes["secrets"]["secret"]
        assert secret["secretName"] == "gpuportal-external"
        assert {item["key"] for item in secret["items"]} == set(keys.values())
        env = env_of(container)
        assert env["SECRET_KEY_FILE"] == f"/run/secrets/gpuportal/{keys['secretKey']}"
        assert env["DATABASE_URL_FILE"] == f"/run/secrets/gpuportal/{keys['databaseUrl']}"
        assert env["GP_METRICS_TOKEN_FILE"] == f"/run/secrets/gpuportal/{keys['metricsToken']}"
        assert "SECRET_KEY" not in env and "DATABASE_URL" not in env and "REDIS_URL" not in env
        assert volumes["batch-files"]["persistentVolumeClaim"]["claimName"] == "gpuportal-batch-files"


def test_the_charts_own_secret_holds_what_the_values_give():
    secret = one(render("ci/sentinel-values.yaml"), "Secret", "gp-gpuportal-secrets")
    values = yaml.safe_load((CHART / "ci/sentinel-values.yaml").read_text())
    assert secret["stringData"]["secret-key"] == values["secretKey"]
    assert secret["stringData"]["database-url"] == values["database"]["url"]
    assert secret["stringData"]["metrics-token"] == values["metrics"]["token"]
    generated = one(render(), "Secret", "gp-gpuportal-secrets")["stringData"]
    assert len(generated["secret-key"]) >= 50 and "metrics-token" not in generated


def test_the_service_monitor_scrapes_one_address_with_the_metrics_token():
    docs = render("ci/external-values.yaml")
    monitor = one(docs, "ServiceMonitor", "gp-gpuportal-gateway")
    service = one(docs, "Service", "gp-gpuportal-gateway")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"] == {"type": "Bearer",
                                         "credentials": {"name": "gpuportal-external", "key": "metrics-token"}}
    # Every pod's target becomes the Service's address (the totals are the same from every pod), and
    # the gateway answers that host name.
    relabel = {r["targetLabel"]: r["replacement"] for r in endpoint["relabelings"] if "targetLabel" in r}
    assert relabel["__address__"] == "gp-gpuportal-gateway.llm.svc:8000"
    assert relabel["job"] == "gpuportal"  # the job deploy/prometheus/alerts.yml reads
    gateway = one(docs, "Deployment", "gp-gpuportal-gateway")["spec"]["template"]["spec"]["containers"][0]
    assert "gp-gpuportal-gateway.llm.svc" in env_of(gateway)["ALLOWED_HOSTS"].split(",")
    assert not [d for d in render() if d["kind"] == "ServiceMonitor"]


def test_the_autoscaler_owns_the_gateways_replicas():
    docs = render("ci/external-values.yaml")
    autoscaler = one(docs, "HorizontalPodAutoscaler", "gp-gpuportal-gateway")
    assert autoscaler["apiVersion"] == "autoscaling/v2"
    assert autoscaler["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                    "name": "gp-gpuportal-gateway"}
    assert "replicas" not in one(docs, "Deployment", "gp-gpuportal-gateway")["spec"]
    assert one(render(), "Deployment", "gp-gpuportal-gateway")["spec"]["replicas"] == 2


@pytest.mark.parametrize("values", VALUE_FILES)
def test_every_process_runs_as_non_root_on_a_read_only_root(values: str | None):
    for doc, container in containers(render(values)):
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/tmp" in mounts, doc["metadata"]["name"]  # beat's schedule, spooled uploads
        assert env_of(container)["GP_BATCH_FILES_DIR"] in mounts


def test_scheduling_values_reach_the_pods():
    docs = render("ci/external-values.yaml")
    for doc, _ in containers(docs):
        pod = doc["spec"]["template"]["spec"]
        assert pod["tolerations"][0]["value"] == "gpuportal"
        assert "podAntiAffinity" in pod["affinity"]
    gateway = one(docs, "Deployment", "gp-gpuportal-gateway")["spec"]["template"]["spec"]
    worker = one(docs, "Deployment", "gp-gpuportal-worker")["spec"]["template"]["spec"]
    assert gateway["nodeSelector"] == {"node-role.lab.example/web": "true"}
    assert "nodeSelector" not in worker


def test_the_replicas_in_the_values_are_registered_after_install_with_add_replicas_own_options():
    docs = render("ci/sentinel-values.yaml")
    job = one(docs, "Job", "gp-gpuportal-replicas")
    assert set(job["metadata"]["annotations"]["helm.sh/hook"].split(",")) == {"post-install", "post-upgrade"}
    [container] = job["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    parser = AddReplica().create_parser("manage.py", "add_replica")
    parsed = [vars(parser.parse_args(args)) for args in json.loads(container["args"][0])]
    assert [(p["name"], p["url"], p["model"], p["max_num_seqs"], p["policy"], p["model_kind"]) for p in parsed] == [
        ("gpu0", "http://vllm-gpu0.llm.svc:8000", "qwen3-8b", 64, "priority", "chat"),
        ("embed0", "http://vllm-embed0.llm.svc:8000", "bge-m3", 32, "fcfs", "embedding"),
    ]
    # The engine's key: named in the arguments, read from a Secret by the environment.
    assert parsed[0]["api_key"] == "env:GP_REPLICA_API_KEY_0"
    assert env["GP_REPLICA_API_KEY_0"] == {"secretKeyRef": {"name": "vllm-gpu0", "key": "api-key"}}
    assert parsed[1]["api_key"] == ""
    assert not [d for d in render() if d["metadata"]["name"] == "gp-gpuportal-replicas"]


def test_the_chart_says_how_to_install_it():
    readme = (CHART / "README.md").read_text()
    for value in ("existingSecret", "redis.sentinel", "replicas", "batchFiles.existingClaim",
                  "metrics.serviceMonitor.enabled", "gateway.autoscaling.enabled"):
        assert value in readme, value
