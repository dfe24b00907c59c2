"""The Django admin: every model readable, raw edits within the portal's rules."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fairness.models import Account, ApiKey, AuditEntry, Replica, Tier

pytestmark = pytest.mark.django_db(transaction=True)

MODELS = ["tier", "apikey", "replica", "saturationalert", "auditentry", "admintoken", "usagerecord",
          "usagehourly", "enginesample"]


@pytest.fixture
def admin_client(cast) -> Client:
    client = Client(REMOTE_ADDR="127.10.0.8")
    client.force_login(get_user_model().objects.create_superuser("root", password="a long root password"))
    return client


def test_every_model_is_listed_and_readable(admin_client):
    index = admin_client.get("/admin/").content.decode()
    for name in MODELS:
        assert f"/admin/fairness/{name}/" in index
        assert admin_client.get(f"/admin/fairness/{name}/").status_code == 200, name


def test_keys_cannot_be_added_here_and_their_hash_is_not_shown(admin_client, cast):
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    assert admin_client.get("/admin/fairness/apikey/add/").status_code == 403
    page = admin_client.get(f"/admin/fairness/apikey/{key.pk}/change/").content.decode()
    assert key.prefix in page and key.secret_hash not in page
    assert admin_client.get("/admin/fairness/auditentry/add/").status_code == 403


def test_the_revoke_action_revokes_and_audits(admin_client, cast):
    key = ApiKey.objects.get(pk=cast["bob"].key_id)
    response = admin_client.post("/admin/fairness/apikey/", {"action": "revoke", "_selected_action": [key.pk]},
                                 follow=True)
    assert "Revoked 1 key(s)." in response.content.decode()
    key.refresh_from_db()
    assert key.revoked_at is not None
    entry = AuditEntry.objects.get(action="key.revoke")
    assert (entry.target, entry.actor_name, entry.ip) == (key.prefix, "root", "127.10.0.8")


def test_tier_account_and_membership_edits_here_are_audited_like_the_staff_pages(admin_client, cast):
    batch = Tier.objects.get(name="batch")
    fields = {name: getattr(batch, name) for name in (
        "name", "description", "per_key_concurrency", "head_start_seconds", "max_queue_wait_seconds",
        "max_queued_per_key", "engine_priority", "fairshare_weight_seconds", "max_key_days")}
    fields = {k: ("" if v is None else v) for k, v in fields.items()}
    fields.update(pool_concurrency=batch.pool_concurrency or "", max_queued=batch.max_queued or "",
                  borrow_idle_slots="on" if batch.borrow_idle_slots else "", queue_events="on",
                  isolate_prefix_cache="on", self_service_keys="on", allowed_models=json.dumps(batch.allowed_models),
                  key_requests_per_minute=7)
    response = admin_client.post(f"/admin/fairness/tier/{batch.pk}/change/", fields)
    assert response.status_code == 302, response.content.decode()[:2000]
    entry = AuditEntry.objects.get(action="tier.update", target="batch")
    assert entry.detail == {"key_requests_per_minute": 7} and (entry.actor_name, entry.ip) == ("root", "127.10.0.8")

    account = {"name": "physics", "shares": 3, "description": "", "allowed_models": "[]",
               "created_at_0": "2026-12-01", "created_at_1": "00:00:00"}
    added = admin_client.post("/admin/fairness/account/add/", account)
    assert added.status_code == 302, added.content.decode()[:2000]
    assert AuditEntry.objects.get(action="account.add", target="physics").detail["shares"] == 3
    physics = Account.objects.get(name="physics")
    assert admin_client.post(f"/admin/fairness/account/{physics.pk}/delete/", {"post": "yes"}).status_code == 302
    assert AuditEntry.objects.filter(action="account.delete", target="physics").exists()


def replica_fields(replica: Replica, **changes) -> dict:
    fields = {"name": replica.name, "base_url": replica.base_url, "model": replica.model,
              "engine_kind": replica.engine_kind, "max_num_seqs": replica.max_num_seqs,
              "scheduling_policy": replica.scheduling_policy, "api_key": "", "enabled": "on"}
    return {**fields, **changes}


def test_editing_a_replica_keeps_its_engine_key_and_refuses_overlapping_deployments(admin_client, tiers):
    gpu0 = Replica.objects.create(name="gpu0", base_url="http://127.11.2.3:9", model="tiny", api_key="engine-key")
    gpu1 = Replica.objects.create(name="gpu1", base_url="http://127.11.2.4:9", model="other")
    gpu1.tiers.set([tiers["batch"]])

    page = admin_client.get(f"/admin/fairness/replica/{gpu0.pk}/change/").content.decode()
    assert "engine-key" not in page
    saved = admin_client.post(f"/admin/fairness/replica/{gpu0.pk}/change/", replica_fields(gpu0, max_num_seqs=16))
    assert saved.status_code == 302
    gpu0.refresh_from_db()
    assert (gpu0.max_num_seqs, gpu0.api_key) == (16, "engine-key")
    entry = AuditEntry.objects.get(action="replica.update", target="gpu0")
    assert (entry.actor_name, entry.ip, entry.detail) == ("root", "127.10.0.8", {"max_num_seqs": 16, "tiers": []})

    moved = admin_client.post(f"/admin/fairness/replica/{gpu1.pk}/change/",
                              replica_fields(gpu1, model="tiny", tiers=[tiers["batch"].pk]))
    assert moved.status_code == 200 and "count gpu0&#x27;s slots as its own" in moved.content.decode()
    assert Replica.objects.get(pk=gpu1.pk).model == "other"
