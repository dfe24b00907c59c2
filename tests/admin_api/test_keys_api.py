"""Keys through the admin API: the secret appears once, validation names the field, all audited."""

import json

import pytest

from fairness.gateway.api_keys import hash_secret
from fairness.models import ApiKey, AuditEntry, Replica, Tier

pytestmark = pytest.mark.django_db(transaction=True)


def post(client, path, body):
    return client.post(path, data=json.dumps(body), content_type="application/json")


def test_issuing_returns_the_secret_once_and_stores_only_its_hash(staff_client, cast):
    response = post(staff_client, "/api/admin/keys",
                    {"owner": "carol", "tier": "batch", "label": "nightly", "expires_days": 30})
    assert response.status_code == 201
    secret = response.json()["secret"]
    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    assert key.label == "nightly" and key.expires_at is not None
    listing = staff_client.get("/api/admin/keys").content.decode()
    assert secret not in listing and key.prefix in listing
    assert AuditEntry.objects.filter(action="key.issue", target=key.prefix, actor_name="sam").exists()


def test_rotation_with_grace_keeps_the_old_key_until_then(staff_client, cast):
    old = ApiKey.objects.get(pk=cast["alice"].key_id)
    response = post(staff_client, f"/api/admin/keys/{old.prefix}/rotate", {"grace_seconds": 3600})
    assert response.status_code == 200
    new = ApiKey.objects.get(prefix=response.json()["key"]["prefix"])
    old.refresh_from_db()
    assert old.revoked_at is None and old.expires_at is not None
    assert (new.owner, new.tier, new.label) == (old.owner, old.tier, old.label)
    assert response.json()["secret"].startswith("gp-")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/admin/keys", {"owner": "nobody", "tier": "interactive"}, "owner"),
        ("/api/admin/keys", {"owner": "alice", "tier": "gold"}, "tier"),
        ("/api/admin/keys", {"owner": "alice", "tier": "batch", "expires_days": 0}, "expires_days"),
        ("/api/admin/tiers", {"name": "x", "per_key_concurrency": 0}, "per_key_concurrency"),
        ("/api/admin/tiers", {"name": "x", "per_key_concurrency": 4, "pool_concurrency": 2}, "pool_concurrency"),
        ("/api/admin/tiers", {"name": "x", "head_start_seconds": -1}, "head_start_seconds"),
        ("/api/admin/tiers", {"name": "x", "max_queued": 0}, "max_queued"),
        ("/api/admin/users", {"username": "has space"}, "username"),
        ("/api/admin/replicas", {"name": "r", "base_url": "not a url", "model": "m"}, "base_url"),
    ],
)
def test_invalid_input_is_a_422_naming_the_field(staff_client, cast, path, body, field):
    response = post(staff_client, path, body)
    assert response.status_code == 422, response.content
    assert field in response.content.decode()


def test_a_tier_edit_is_audited_and_validated_as_a_whole(staff_client, cast):
    response = staff_client.patch("/api/admin/tiers/batch", data=json.dumps({"pool_concurrency": 1}),
                                  content_type="application/json")
    assert response.status_code == 422 and "pool_concurrency" in response.content.decode()
    response = staff_client.patch("/api/admin/tiers/batch", data=json.dumps({"pool_concurrency": 4}),
                                  content_type="application/json")
    assert response.status_code == 200
    assert Tier.objects.get(name="batch").pool_concurrency == 4
    entry = AuditEntry.objects.get(action="tier.update")
    assert entry.detail == {"pool_concurrency": 4}


def test_a_tiers_queue_bound_is_set_changed_and_cleared_through_the_api(staff_client, cast):
    created = post(staff_client, "/api/admin/tiers", {"name": "gold", "max_queued": 40})
    assert created.status_code == 201 and created.json()["max_queued"] == 40
    assert post(staff_client, "/api/admin/tiers", {"name": "lead"}).json()["max_queued"] is None

    def patch(body):
        return staff_client.patch("/api/admin/tiers/gold", data=json.dumps(body), content_type="application/json")

    assert patch({"max_queued": 0}).status_code == 422
    assert patch({"max_queued": 80}).json()["max_queued"] == 80
    assert patch({"clear_max_queued": True}).json()["max_queued"] is None
    assert Tier.objects.get(name="gold").max_queued is None
    assert [e.detail for e in AuditEntry.objects.filter(action="tier.update").order_by("pk")] == [
        {"max_queued": 80}, {"max_queued": None}]


def test_every_policy_of_a_tier_is_set_and_cleared_through_the_api(staff_client, cast):
    created = post(staff_client, "/api/admin/tiers", {
        "name": "gold", "fairshare_weight_seconds": 60, "queue_events": False, "key_requests_per_minute": 30,
        "key_tokens_per_minute": 90_000, "requests_per_minute": 600, "tokens_per_minute": 1_000_000,
    })
    assert created.status_code == 201, created.content
    gold = Tier.objects.get(name="gold")
    assert (gold.fairshare_weight_seconds, gold.queue_events, gold.key_requests_per_minute, gold.key_tokens_per_minute,
            gold.requests_per_minute, gold.tokens_per_minute) == (60.0, False, 30, 90_000, 600, 1_000_000)
    listed = next(t for t in staff_client.get("/api/admin/tiers").json() if t["name"] == "gold")
    assert listed["key_requests_per_minute"] == 30 and listed["queue_events"] is False

    def patch(body):
        return staff_client.patch("/api/admin/tiers/gold", data=json.dumps(body), content_type="application/json")

    assert patch({"key_requests_per_minute": 0}).status_code == 422
    assert patch({"fairshare_weight_seconds": -1}).status_code == 422
    assert patch({"clear_rate_limits": ["no_such_limit"]}).status_code == 422
    changed = patch({"key_requests_per_minute": 12, "clear_rate_limits": ["tokens_per_minute", "requests_per_minute"]})
    assert changed.status_code == 200
    gold.refresh_from_db()
    assert (gold.key_requests_per_minute, gold.requests_per_minute, gold.tokens_per_minute) == (12, None, None)
    assert AuditEntry.objects.filter(action="tier.update").order_by("-pk").first().detail == {
        "key_requests_per_minute": 12, "tokens_per_minute": None, "requests_per_minute": None}


def test_unknown_things_are_404(staff_client, cast):
    assert post(staff_client, "/api/admin/keys/gp-nothing/revoke", {}).status_code == 404
    assert post(staff_client, "/api/admin/replicas/none/drain", {}).status_code == 404
    assert post(staff_client, "/api/admin/replicas/none/explode", {}).status_code in (404, 422)


def test_a_retry_with_the_same_idempotency_key_makes_no_second_key(staff_client, cast):
    body = {"owner": "carol", "tier": "batch", "label": "nightly"}
    first = staff_client.post("/api/admin/keys", data=json.dumps(body), content_type="application/json",
                              headers={"Idempotency-Key": "nightly-2026-11-29"})
    secret = first.json()["secret"]

    retry = staff_client.post("/api/admin/keys", data=json.dumps(body), content_type="application/json",
                              headers={"Idempotency-Key": "nightly-2026-11-29"})

    assert (first.status_code, retry.status_code) == (201, 409)
    assert f"already made key {secret[:11]}…" in retry.json()["detail"] and secret not in retry.content.decode()
    assert ApiKey.objects.filter(label="nightly").count() == 1
    # Without the header, or with another value, each request is its own.
    assert post(staff_client, "/api/admin/keys", body).status_code == 201
    other = staff_client.post("/api/admin/keys", data=json.dumps(body), content_type="application/json",
                              headers={"Idempotency-Key": "nightly-2026-11-30"})
    assert other.status_code == 201
    assert ApiKey.objects.filter(label="nightly").count() == 3


def test_a_retried_rotation_without_grace_names_the_key_it_made(staff_client, cast):
    old = ApiKey.objects.get(pk=cast["alice"].key_id)
    path, headers = f"/api/admin/keys/{old.prefix}/rotate", {"Idempotency-Key": "rotate-alice"}
    first = staff_client.post(path, data=json.dumps({"grace_seconds": 0}), content_type="application/json",
                              headers=headers)
    retry = staff_client.post(path, data=json.dumps({"grace_seconds": 0}), content_type="application/json",
                              headers=headers)

    assert (first.status_code, retry.status_code) == (200, 409)
    assert first.json()["key"]["prefix"] in retry.json()["detail"]
    assert ApiKey.objects.filter(owner=old.owner).count() == 2


@pytest.mark.parametrize("value", ["", "has space", "x" * 256])
def test_a_malformed_idempotency_key_is_refused(staff_client, cast, value):
    response = staff_client.post("/api/admin/keys", data=json.dumps({"owner": "carol", "tier": "batch"}),
                                 content_type="application/json", headers={"Idempotency-Key": value})
    assert response.status_code == 400 and "Idempotency-Key" in response.json()["detail"]
    assert ApiKey.objects.count() == 3  # the cast's


def test_adding_a_replica_that_would_overlap_a_deployment_is_422(staff_client, cast):
    Replica.objects.create(name="gpu0", base_url="http://127.11.2.3:9", model="tiny", max_num_seqs=8)
    response = post(staff_client, "/api/admin/replicas", {"name": "gpu1", "base_url": "http://127.11.2.4:9",
                                                          "model": "tiny", "tiers": ["batch"]})
    assert response.status_code == 422 and response.json()["detail"].startswith("tiers: Model tiny")
    assert not Replica.objects.filter(name="gpu1").exists()


def test_adding_a_replica_that_serves_a_model_as_another_kind_is_422(staff_client, cast):
    Replica.objects.create(name="gpu0", base_url="http://127.11.2.3:9", model="tiny", max_num_seqs=8)
    body = {"name": "gpu1", "base_url": "http://127.11.2.4:9", "model": "tiny", "model_kind": "embedding"}
    response = post(staff_client, "/api/admin/replicas", body)
    assert response.status_code == 422 and "as chat and as embedding models" in response.json()["detail"]
    assert not Replica.objects.filter(name="gpu1").exists()
    added = post(staff_client, "/api/admin/replicas", {**body, "model": "tiny-embed"})
    assert added.status_code == 201 and added.json()["model_kind"] == "embedding"
