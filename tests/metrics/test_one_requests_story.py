"""One request followed through everything that tells its story: its row in the request log and
its timeline page, its trace in a real OTLP receiver, its buckets in the latency histograms on
/metrics, and an alert rule firing in `promtool test rules` on series scraped from the same
gateway (a replica that is down beside the one that served it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from fairness.accounting import usage
from fairness.models import Replica, UsageRecord
from fairness.store.redis_clients import redis_sync
from tests.support import otlp_receiver
from tests.support.cast import MODEL
from tests.support.gateway_process import ROOT, GatewayProcess
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.polling import wait_for
from tests.support.processes import start_gateway

RULES = ROOT / "deploy/prometheus/alerts.yml"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    yield from otlp_receiver.running()


@pytest.fixture(scope="module")
def traced(live_db_url: str, receiver: OtlpReceiver) -> Iterator[GatewayProcess]:
    process = start_gateway(live_db_url, name="story", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=receiver.url,
                            OTEL_BSP_SCHEDULE_DELAY="50")
    yield process
    process.stop()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the series `name{labels...}` (labels matched, others allowed) in a scrape."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name):line.rindex("}") + 1]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_one_request_leaves_a_log_row_a_timeline_a_trace_histogram_buckets_and_an_alert_that_fires(
    traced, receiver, replica, cast, staff_client, tmp_path: Path,
):
    assert shutil.which("promtool"), "promtool is missing: scripts/ensure-system.sh installs it"
    Replica.objects.create(name="sim-dead", base_url="http://127.0.0.1:9", model=MODEL, max_num_seqs=8)
    alice = cast["alice"]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5, "stream": True,
            "ignore_eos": True}
    with httpx.stream("POST", traced.url + "/v1/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {alice.secret}"}) as response:
        response.read()
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]

    # The request log: its row, once the flush has run, and its timeline page.
    def logged() -> UsageRecord | None:
        usage.flush(redis_sync())
        return UsageRecord.objects.filter(request_id=request_id).first()

    row = wait_for(logged, timeout=15, what="the request's row in the log")
    assert (row.status, row.ended, row.held_by, row.replica) == (200, "done", "", "sim-a")
    assert row.completion_tokens == 5 and row.ttft_ms is not None
    timeline = staff_client.get(f"/staff/requests/{request_id}/")
    assert timeline.status_code == 200
    page = timeline.content.decode()
    assert request_id in page and "first token" in page.lower()

    # Its trace: the server span and the engine call under it, in the receiver.
    server = wait_for(lambda: receiver.server_span(request_id), timeout=15, what="the request's server span")
    names = {span.name for span in receiver.trace(server.trace_id)}
    assert {"POST /v1/chat/completions", f"chat {MODEL}"} <= names

    # Its buckets in the latency histograms, and the dead replica's gauge, on /metrics.
    def scraped() -> str | None:
        text = httpx.get(traced.url + "/metrics", timeout=10).text
        counted = sample(text, "gpuportal_time_to_first_token_seconds_count", tier="interactive", model=MODEL,
                         stream="true")
        down = sample(text, "gpuportal_replica_up", replica="sim-dead")
        return text if counted and counted >= 1 and down == 0 else None

    text = wait_for(scraped, timeout=30, what="the request's buckets and the dead replica's gauge")
    assert (sample(text, "gpuportal_request_duration_seconds_count", tier="interactive", model=MODEL) or 0) >= 1
    assert sample(text, "gpuportal_replica_up", replica="sim-a") == 1

    # The shipped rule fires on what was scraped, held for two minutes.
    scraped_up = {name: labels_of(text, "gpuportal_replica_up", replica=name) for name in ("sim-a", "sim-dead")}
    series = [
        {"series": "gpuportal_replica_up{" + ",".join(f'{k}="{v}"' for k, v in {**labels, "job": "gpuportal"}.items())
         + "}", "values": f"{sample(text, 'gpuportal_replica_up', replica=name):.0f}x4"}
        for name, labels in scraped_up.items()
    ]
    rule = _rule("GpuportalReplicaDown")
    dead = {**scraped_up["sim-dead"], "job": "gpuportal"}
    test_file = tmp_path / "story_test.yml"
    test_file.write_text(yaml.safe_dump({
        "rule_files": [str(RULES)],
        "evaluation_interval": "30s",
        "tests": [{
            "interval": "30s",
            "input_series": series,
            "alert_rule_test": [{
                "eval_time": "2m", "alertname": "GpuportalReplicaDown",
                "exp_alerts": [{"exp_labels": {**rule["labels"], **dead},
                                "exp_annotations": {k: _rendered(v, dead) for k, v in rule["annotations"].items()}}],
            }],
        }],
    }))
    tested = subprocess.run(["promtool", "test", "rules", str(test_file)], capture_output=True, text=True,
                            timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def labels_of(text: str, name: str, **labels: str) -> dict[str, str]:
    """The labels of the series `name{labels...}` in a scrape."""
    for line in text.splitlines():
        if line.startswith(name + "{"):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name):line.rindex("}") + 1]))
            if all(found.get(k) == v for k, v in labels.items()):
                return found
    raise AssertionError(f"no {name} {labels} in the scrape")


def _rule(alert: str) -> dict:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return next(r for g in groups for r in g["rules"] if r.get("alert") == alert)


def _rendered(template: str, labels: dict[str, str]) -> str:
    """The rule's annotation as Prometheus renders it (these use only {{ $labels.x }})."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
