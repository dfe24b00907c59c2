"""The staff home: what needs attention now, with links; staff land there after signing in."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.test import Client
from django.utils import timezone

from fairness.actions.audit import Actor
from fairness.actions.keys import rotate
from fairness.models import ApiKey, Replica, SaturationAlert
from fairness.portal.reports.queries import attention, longest_queue
from fairness.store import heartbeats, keyspace

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_calm_portal_says_nothing_needs_attention(staff_client, cast, redis_client):
    heartbeats.record(redis_client, heartbeats.PERIODIC)  # the worker runs
    html = staff_client.get("/staff/").content.decode()
    assert "Nothing needs attention" in html
    assert "Nobody is waiting." in html
    assert '<span class="badge warn">problem</span>' not in html


def test_a_stopped_worker_is_a_problem_on_the_staff_home_in_plain_words(staff_client, cast, redis_client):
    heartbeats.record(redis_client, heartbeats.PERIODIC, clock=lambda: time.time() - 600)
    html = staff_client.get("/staff/").content.decode()
    assert "Nothing needs attention" not in html
    assert 'id="home-background">Background work</h2>' in html
    assert ('<strong>Periodic tasks</strong> <span class="badge warn">problem</span>: '
            "No periodic task has run for 10 min") in html
    assert "Start Celery beat and a worker" in html
    assert '<strong>Usage flush</strong> <span class="badge ok">ok</span>' in html


def test_researchers_never_see_the_workers_health(researcher_client, redis_client):
    heartbeats.record(redis_client, heartbeats.PERIODIC, clock=lambda: time.time() - 600)
    response = researcher_client.get("/staff/")
    assert response.status_code == 403 and b"Background work" not in response.content
    assert b"Background work" not in researcher_client.get("/me/").content


def test_it_lists_open_alerts_down_replicas_and_keys_expiring_within_a_week(staff, staff_client, cast,
                                                                            redis_client):
    now = timezone.now()
    open_alert = SaturationAlert.objects.create(model="tiny", kind="queue", opened_at=now, figures={})
    SaturationAlert.objects.create(model="other-model", kind="kv", opened_at=now - dt.timedelta(hours=2),
                                   resolved_at=now - dt.timedelta(hours=1), figures={})
    down = Replica.objects.create(name="gpu-down", base_url="http://127.19.9.9:9", model="tiny")
    Replica.objects.create(name="gpu-off", base_url="http://127.19.9.7:9", model="tiny", enabled=False)
    redis_client.set(keyspace.health_verdict(down.name, down.base_url), "down")
    soon = ApiKey.objects.get(pk=cast["alice"].key_id)
    soon.expires_at = now + dt.timedelta(days=6)
    soon.save()
    later = ApiKey.objects.get(pk=cast["bob"].key_id)
    later.expires_at = now + dt.timedelta(days=8)
    later.save()
    carol = ApiKey.objects.get(pk=cast["carol"].key_id)
    rotate(Actor(staff), carol, grace_seconds=3600)  # carol's old key ends in an hour

    html = staff_client.get("/staff/").content.decode()

    assert "Nothing needs attention" not in html
    assert f'href="/staff/alerts/#alert-{open_alert.pk}"' in html and "other-model" not in html
    assert f", alert {open_alert.pk}</span></a>" in html  # two alerts of one model and kind differ by name
    assert 'href="/staff/replicas/gpu-down/edit/"' in html and "failed its health checks" in html
    assert "gpu-off" not in html  # disabled on purpose: not down
    assert soon.prefix in html and later.prefix not in html
    assert f"{carol.prefix}…</code></a> of carol" in html and "rotated, ends in 1 h" in html


def test_a_replica_whose_last_poll_failed_counts_as_down(cast):
    Replica.objects.create(name="gpu0", base_url="http://127.19.9.9:9", model="tiny")
    readings = {"gpu0": {"name": "gpu0", "healthy": False, "error": "The engine (gpu0) is unreachable."}}
    found = attention(timezone.now(), readings, {"groups": {}, "tiers": {}, "keys": {}, "replicas": {},
                                                 "longest_wait": 0.0})
    # A gateway of an earlier test may have found it down too and said so first: both reasons stand.
    [down] = found.replicas_down
    assert down.replica.name == "gpu0" and down.why.endswith("its last poll failed: The engine (gpu0) is unreachable.")


def test_the_longest_queue_is_the_tier_whose_oldest_request_waited_longest():
    stats = {"groups": {}, "keys": {}, "replicas": {}, "longest_wait": 42.0, "tiers": {
        "interactive": {"in_flight": 2, "borrowed": 0, "queued": 9, "longest_wait": 3.0},
        "batch": {"in_flight": 2, "borrowed": 0, "queued": 4, "longest_wait": 42.0},
        "idle": {"in_flight": 1, "borrowed": 0, "queued": 0, "longest_wait": 0.0},
    }}
    queue = longest_queue(stats)
    assert queue is not None and (queue.tier, queue.queued, queue.longest_wait) == ("batch", 4, 42.0)
    assert longest_queue({**stats, "tiers": {"idle": stats["tiers"]["idle"]}}) is None


def test_staff_land_on_the_staff_home_and_researchers_on_their_own_page(staff, cast, redis_url):
    from django.contrib.auth import get_user_model

    alice = get_user_model().objects.get(username="alice")
    alice.set_password("alice's long password")
    alice.save()
    for username, password, landing in (("sam", "a long staff password", "/staff/"),
                                        ("alice", "alice's long password", "/me/")):
        response = Client().post("/accounts/login/", {"username": username, "password": password})
        assert response.status_code == 302 and response["Location"] == landing
    # A `next` still wins: a link to a page leads back to that page.
    response = Client().post("/accounts/login/?next=/staff/keys/", {"username": "sam",
                                                                     "password": "a long staff password",
                                                                     "next": "/staff/keys/"})
    assert response["Location"] == "/staff/keys/"
