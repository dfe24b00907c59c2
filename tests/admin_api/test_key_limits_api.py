"""A key's own limits through the admin API: issued and patched within the tier, 422 naming the
field above it (and nothing made or changed), null back to the tier's, returned with the key."""

from __future__ import annotations

import json

import pytest

from fairness.models import ApiKey, AuditEntry, KeyLimits, Tier
from fairness.store.keyspace import CONFIG_EPOCH

pytestmark = pytest.mark.django_db(transaction=True)


def send(client, method, path, body, **extra):
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json", **extra)


def test_a_key_is_issued_with_limits_within_its_tier_and_returned_with_them(staff_client, cast):
    Tier.objects.filter(name="batch").update(allowed_models=["m-a", "m-b"])
    response = send(staff_client, "post", "/api/admin/keys", {
        "owner": "carol", "tier": "batch", "max_concurrent": 1, "tokens_per_minute": 9000, "allowed_models": ["m-b"]})
    assert response.status_code == 201, response.content
    out = response.json()["key"]
    assert (out["max_concurrent"], out["requests_per_minute"], out["tokens_per_minute"], out["allowed_models"]) == (
        1, None, 9000, ["m-b"])
    key = ApiKey.objects.get(prefix=out["prefix"])
    assert KeyLimits.of(key) == KeyLimits(1, None, 9000, ("m-b",))
    assert AuditEntry.objects.get(action="key.issue", target=key.prefix).detail["limits"]["max_concurrent"] == 1


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"max_concurrent": 3}, "max_concurrent", "At most 2, the batch tier's"),
    ({"allowed_models": ["m-c"]}, "allowed_models", "m-c: not among the batch tier's models"),
    ({"requests_per_minute": 101}, "requests_per_minute", "At most 100"),
])
def test_a_figure_above_the_tiers_is_a_422_naming_the_field_and_makes_nothing(staff_client, cast, body, field,
                                                                              words):
    Tier.objects.filter(name="batch").update(allowed_models=["m-a"], requests_per_minute=100)
    before = ApiKey.objects.count()
    response = send(staff_client, "post", "/api/admin/keys", {"owner": "carol", "tier": "batch", **body})
    assert response.status_code == 422, response.content
    assert field in response.json()["detail"] and words in response.json()["detail"]
    assert ApiKey.objects.count() == before
    carols = ApiKey.objects.get(pk=cast["carol"].key_id)
    patched = send(staff_client, "patch", f"/api/admin/keys/{carols.prefix}", body)
    assert patched.status_code == 422 and words in patched.json()["detail"]
    carols.refresh_from_db()
    assert KeyLimits.of(carols) == KeyLimits()


def test_a_patch_changes_only_the_limits_it_names_and_null_gives_back_the_tiers(staff_client, cast, redis_client):
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    path = f"/api/admin/keys/{key.prefix}"
    assert send(staff_client, "patch", path, {"max_concurrent": 1, "requests_per_minute": 40}).status_code == 200
    redis_client.delete(CONFIG_EPOCH)
    out = send(staff_client, "patch", path, {"requests_per_minute": None}).json()
    assert (out["max_concurrent"], out["requests_per_minute"]) == (1, None)
    assert redis_client.get(CONFIG_EPOCH) is not None  # every gateway is told
    key.refresh_from_db()
    assert KeyLimits.of(key) == KeyLimits(max_concurrent=1)
    # A body of limits alone leaves the front end as it was, and writes no front-end entry.
    assert not AuditEntry.objects.filter(action="key.front_end").exists()
    assert AuditEntry.objects.filter(action="key.limits", target=key.prefix, actor_name="sam").count() == 2


def test_only_staff_may_set_a_keys_limits(cast, researcher_client, admin_token):
    key = ApiKey.objects.get(pk=cast["bob"].key_id)
    path = f"/api/admin/keys/{key.prefix}"
    assert send(researcher_client, "patch", path, {"max_concurrent": 1}).status_code == 401
    key.refresh_from_db()
    assert key.max_concurrent is None
    from django.test import Client

    by_token = send(Client(), "patch", path, {"max_concurrent": 1}, HTTP_AUTHORIZATION=f"Bearer {admin_token}")
    assert by_token.status_code == 200 and by_token.json()["max_concurrent"] == 1
