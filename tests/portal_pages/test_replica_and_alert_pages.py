"""Replicas and alerts through the pages: health at a glance, drain, the figures behind an alert."""

from __future__ import annotations

import json
import time

import pytest
from django.utils import timezone

from fairness.models import Replica, SaturationAlert
from fairness.store.keyspace import TELEMETRY_LATEST
from tests.support.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def test_adding_a_replica_keeps_its_key_out_of_the_page_and_the_log(staff_client, tiers):
    response = staff_client.post("/staff/replicas/new/", {
        "name": "gpu1", "base_url": f"http://127.0.0.1:{free_port()}", "model": "tiny", "engine_kind": "vllm",
        "max_num_seqs": 8, "scheduling_policy": "fcfs", "api_key": "engine-secret-123", "tiers": [tiers["batch"].pk],
    })
    assert response.status_code == 302
    replica = Replica.objects.get(name="gpu1")
    assert replica.api_key == "engine-secret-123"
    assert list(replica.tiers.values_list("name", flat=True)) == ["batch"]
    assert "engine-secret-123" not in staff_client.get("/staff/audit/").content.decode()
    assert "engine-secret-123" not in staff_client.get("/staff/replicas/").content.decode()


def test_replica_form_errors_name_the_field(staff_client, tiers):
    response = staff_client.post("/staff/replicas/new/", {
        "name": "r", "base_url": "not a url", "model": "has space",
        "engine_kind": "vllm", "max_num_seqs": 0, "scheduling_policy": "fcfs",
    })
    assert response.status_code == 200
    assert set(response.context["form"].errors) == {"base_url", "model", "max_num_seqs"}


def test_the_list_shows_health_load_and_the_last_poll(staff_client, redis_client, tiers):
    Replica.objects.create(name="gpu0", base_url="http://127.11.2.3:9", model="tiny", max_num_seqs=8)
    Replica.objects.create(name="gpu9", base_url="http://127.11.2.9:9", model="tiny")
    Replica.objects.create(name="gpu5", base_url="http://127.11.2.5:9", model="tiny")
    now = time.time()
    redis_client.hset(TELEMETRY_LATEST, "gpu0", json.dumps({
        "name": "gpu0", "healthy": True, "error": "", "taken_at": now - 3,
        "running": 6, "waiting": 2, "max_num_seqs": 8,
    }))
    redis_client.hset(TELEMETRY_LATEST, "gpu9", json.dumps({
        "name": "gpu9", "healthy": False, "error": "ConnectError: refused",
        "taken_at": now - 3, "running": None, "waiting": None, "max_num_seqs": 8,
    }))
    html = staff_client.get("/staff/replicas/").content.decode()
    gpu0 = html[html.index(">gpu0<"):html.index(">gpu5<")]
    assert "healthy" in gpu0 and "6 / 8" in gpu0 and "ago" in gpu0
    gpu9 = html[html.index(">gpu9<"):]
    assert "down" in gpu9 and "ConnectError: refused" in gpu9
    assert "not polled yet" in html[html.index(">gpu5<"):html.index(">gpu9<")]


def test_drain_disable_and_enable(staff_client, tiers):
    Replica.objects.create(name="gpu0", base_url="http://127.11.2.3:9", model="tiny")
    states = []
    for state in ("drain", "disable", "enable"):
        assert staff_client.post(f"/staff/replicas/gpu0/{state}/").status_code == 302
        replica = Replica.objects.get(name="gpu0")
        states.append((replica.enabled, replica.draining))
    assert states == [(True, True), (False, False), (True, False)]


def test_an_alert_shows_its_figures_and_can_be_acknowledged_once(staff, staff_client, tiers):
    alert = SaturationAlert.objects.create(model="tiny", kind="queue", opened_at=timezone.now(),
                                           figures={"waiting": 40, "running": 8, "ratio": 5.0})
    html = staff_client.get("/staff/alerts/").content.decode()
    assert "40 requests waiting for 8 running, and every slot" in html
    assert "<dt>ratio</dt><dd>5.0</dd>" in html
    assert f'Acknowledge<span class="visually-hidden"> alert {alert.pk}</span></button>' in html
    staff_client.post(f"/staff/alerts/{alert.pk}/acknowledge/")
    staff_client.post(f"/staff/alerts/{alert.pk}/acknowledge/")
    alert.refresh_from_db()
    assert alert.acknowledged_by == staff and alert.acknowledged_at is not None
    html = staff_client.get("/staff/alerts/").content.decode()
    assert "acknowledged by sam" in html and "Acknowledge<span" not in html


def test_the_audit_log_is_read_only_and_paged(staff_client, staff, tiers):
    from fairness.actions.audit import Actor, audit

    for n in range(120):
        audit(Actor(staff, "127.10.0.1"), "tier.update", f"t{n}")
    first = staff_client.get("/staff/audit/")
    assert len(first.context["page"].object_list) == 100 and "Older" in first.content.decode()
    assert "t119" in first.content.decode() and "t0<" not in first.content.decode()
    assert "t0<" in staff_client.get("/staff/audit/?page=2").content.decode()
    assert staff_client.post("/staff/audit/").status_code == 405  # nothing to post to


def test_a_replica_whose_slots_two_deployments_would_count_is_refused(staff_client, tiers):
    Replica.objects.create(name="gpu0", base_url="http://127.11.2.3:9", model="tiny", max_num_seqs=8)
    fields = {"name": "gpu1", "base_url": f"http://127.0.0.1:{free_port()}", "model": "tiny", "engine_kind": "vllm",
              "max_num_seqs": 8, "scheduling_policy": "fcfs", "tiers": [tiers["batch"].pk]}

    response = staff_client.post("/staff/replicas/new/", fields)

    assert response.status_code == 200
    assert "count gpu0&#x27;s slots as its own" in response.content.decode()
    assert not Replica.objects.filter(name="gpu1").exists()
    # The same replica for another model shares nothing.
    assert staff_client.post("/staff/replicas/new/", {**fields, "model": "other"}).status_code == 302


def test_enabling_a_replica_that_would_overlap_leaves_it_disabled(staff_client, tiers):
    Replica.objects.create(name="gpu0", base_url="http://127.11.2.3:9", model="tiny", max_num_seqs=8)
    spare = Replica.objects.create(name="gpu1", base_url="http://127.11.2.4:9", model="tiny", enabled=False)
    spare.tiers.set([tiers["batch"]])

    page = staff_client.post("/staff/replicas/gpu1/enable/", follow=True).content.decode()
    api = staff_client.post("/api/admin/replicas/gpu1/enable")

    assert "gpu1 stays disabled" in page
    assert api.status_code == 409 and "twice" in api.json()["detail"]
    assert Replica.objects.get(name="gpu1").enabled is False
