"""Front-end keys through the admin API: issued and changed with their JWT secret sealed, shown
without it, audited, and every gateway told; bad input is a 422 naming the field."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from fairness.gateway.api_keys import hash_secret
from fairness.gateway.front_end_secrets import unseal
from fairness.models import ApiKey, AuditEntry
from fairness.store.keyspace import CONFIG_EPOCH

pytestmark = pytest.mark.django_db(transaction=True)

JWT_SECRET = "open-webui-forwarding-secret-0123456789abcdef"
NEW_SECRET = "a-second-forwarding-secret-fedcba9876543210"


def send(client, method, path, body, **extra):
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json", **extra)


def issued(staff_client, **fields) -> tuple[ApiKey, dict]:
    response = send(staff_client, "post", "/api/admin/keys", {"owner": "alice", "tier": "interactive", **fields})
    assert response.status_code == 201, response.content
    body = response.json()
    return ApiKey.objects.get(secret_hash=hash_secret(body["secret"])), body


def test_issuing_a_front_end_key_seals_its_secret_and_never_shows_it(staff_client, cast):
    key, body = issued(staff_client, front_end="openwebui", front_end_jwt_secret=JWT_SECRET,
                       front_end_adds_people=False)

    assert unseal(key.front_end_secret) == JWT_SECRET
    assert body["key"]["front_end"] == "openwebui"
    assert (body["key"]["front_end_trusts_plain_headers"], body["key"]["front_end_adds_people"]) == (False, False)
    listing = staff_client.get("/api/admin/keys")
    assert listing.status_code == 200
    shown = json.dumps(body) + listing.content.decode() + staff_client.get("/api/admin/audit").content.decode()
    assert JWT_SECRET not in shown and key.front_end_secret not in shown
    entry = AuditEntry.objects.get(action="key.issue", target=key.prefix)
    assert (entry.actor_name, entry.detail["front_end"], entry.detail["jwt_secret_set"]) == ("sam", "openwebui", True)


def test_a_plain_key_shows_it_is_no_front_end(staff_client, cast):
    _, body = issued(staff_client)
    assert (body["key"]["front_end"], body["key"]["front_end_adds_people"]) == ("", True)


def test_patching_changes_the_secret_and_modes_audited_and_gateways_are_told(staff_client, cast, redis_client):
    key, _ = issued(staff_client, front_end="openwebui", front_end_jwt_secret=JWT_SECRET)
    redis_client.set(CONFIG_EPOCH, "before")

    response = send(staff_client, "patch", f"/api/admin/keys/{key.prefix}",
                    {"front_end_jwt_secret": NEW_SECRET, "front_end_trusts_plain_headers": True})

    assert response.status_code == 200, response.content
    assert response.json()["front_end_trusts_plain_headers"] is True
    key.refresh_from_db()
    assert unseal(key.front_end_secret) == NEW_SECRET and key.front_end_adds_people is True  # left as it was
    assert redis_client.get(CONFIG_EPOCH) != b"before"
    entry = AuditEntry.objects.get(action="key.front_end", target=key.prefix)
    assert (entry.detail["secret_replaced"], entry.detail["trusts_plain_headers"]) == (True, True)
    assert NEW_SECRET not in json.dumps(entry.detail) + response.content.decode()


def test_patching_only_a_mode_keeps_the_secret(staff_client, cast):
    key, _ = issued(staff_client, front_end="openwebui", front_end_jwt_secret=JWT_SECRET)

    response = send(staff_client, "patch", f"/api/admin/keys/{key.prefix}", {"front_end_adds_people": False})

    assert response.status_code == 200, response.content
    key.refresh_from_db()
    assert unseal(key.front_end_secret) == JWT_SECRET and key.front_end_adds_people is False
    assert AuditEntry.objects.get(action="key.front_end").detail["secret_replaced"] is False


def test_turning_the_front_end_off_forgets_its_secret(staff_client, cast):
    key, _ = issued(staff_client, front_end="openwebui", front_end_jwt_secret=JWT_SECRET)

    response = send(staff_client, "patch", f"/api/admin/keys/{key.prefix}", {"front_end": ""})

    assert response.status_code == 200 and response.json()["front_end"] == ""
    key.refresh_from_db()
    assert (key.front_end, key.front_end_secret) == ("", "")


def test_a_plain_key_becomes_a_front_end(staff_client, cast):
    key = ApiKey.objects.get(pk=cast["bob"].key_id)

    response = send(staff_client, "patch", f"/api/admin/keys/{key.prefix}",
                    {"front_end": "openwebui", "front_end_jwt_secret": JWT_SECRET})

    assert response.status_code == 200, response.content
    key.refresh_from_db()
    assert key.front_end == "openwebui" and unseal(key.front_end_secret) == JWT_SECRET


@pytest.mark.parametrize(("body", "field"), [
    ({"front_end": "librechat", "front_end_trusts_plain_headers": True}, "front_end"),
    ({"front_end": "openwebui", "front_end_jwt_secret": "short"}, "front_end_jwt_secret"),
    ({"front_end": "openwebui", "front_end_jwt_secret": " " + JWT_SECRET}, "front_end_jwt_secret"),
    ({"front_end": "openwebui"}, "front_end_jwt_secret"),
    ({"front_end_jwt_secret": JWT_SECRET}, "front_end"),
    ({"front_end_trusts_plain_headers": True}, "front_end"),
    ({"front_end": "openwebui", "front_end_jwt_secret": JWT_SECRET + "\x00"}, "front_end_jwt_secret"),
    ({"front_end": "openwebui", "front_end_jwt_secret": "x" * 5000}, "front_end_jwt_secret"),
])
def test_bad_front_end_input_is_a_422_naming_the_field_and_makes_nothing(staff_client, cast, body, field):
    before = ApiKey.objects.count()

    response = send(staff_client, "post", "/api/admin/keys", {"owner": "alice", "tier": "interactive", **body})

    assert response.status_code == 422, response.content
    assert field in response.content.decode()
    assert JWT_SECRET not in response.content.decode()
    assert ApiKey.objects.count() == before and not AuditEntry.objects.filter(action="key.issue").exists()


@pytest.mark.parametrize("body", [
    {"front_end": "openwebui"},  # no secret to check its people with
    {"front_end_trusts_plain_headers": False},  # on a front end with no secret: nothing would name anyone
    {"front_end_jwt_secret": "short"},
    {"front_end": "librechat"},
])
def test_a_patch_that_would_leave_a_broken_front_end_is_refused(staff_client, cast, body):
    key, _ = issued(staff_client, front_end="openwebui", front_end_trusts_plain_headers=True)
    if "front_end" in body:
        key = ApiKey.objects.get(pk=cast["bob"].key_id)

    response = send(staff_client, "patch", f"/api/admin/keys/{key.prefix}", body)

    assert response.status_code == 422, response.content
    assert not AuditEntry.objects.filter(action="key.front_end").exists()


def test_a_revoked_key_is_not_changed(staff_client, cast):
    key = ApiKey.objects.get(pk=cast["bob"].key_id)
    assert staff_client.post(f"/api/admin/keys/{key.prefix}/revoke").status_code == 200

    response = send(staff_client, "patch", f"/api/admin/keys/{key.prefix}",
                    {"front_end": "openwebui", "front_end_jwt_secret": JWT_SECRET})

    assert response.status_code == 409
    key.refresh_from_db()
    assert key.front_end == ""


def test_patching_an_unknown_key_is_a_404(staff_client, cast):
    assert send(staff_client, "patch", "/api/admin/keys/gp-nosuchkey", {"front_end": ""}).status_code == 404


@pytest.mark.parametrize("who", ["anonymous", "researcher"])
def test_only_staff_may_make_or_change_a_front_end_key(cast, researcher_client, who):
    client = Client() if who == "anonymous" else researcher_client
    own = ApiKey.objects.get(pk=cast["alice"].key_id)

    issuing = send(client, "post", "/api/admin/keys", {"owner": "alice", "tier": "interactive",
                                                        "front_end": "openwebui", "front_end_jwt_secret": JWT_SECRET})
    changing = send(client, "patch", f"/api/admin/keys/{own.prefix}",
                    {"front_end": "openwebui", "front_end_jwt_secret": JWT_SECRET})

    assert (issuing.status_code, changing.status_code) == (401, 401)
    own.refresh_from_db()
    assert own.front_end == "" and ApiKey.objects.count() == 3


def test_an_admin_token_may_change_one(admin_token, cast):
    key = ApiKey.objects.get(pk=cast["carol"].key_id)

    response = send(Client(), "patch", f"/api/admin/keys/{key.prefix}",
                    {"front_end": "openwebui", "front_end_trusts_plain_headers": True},
                    HTTP_AUTHORIZATION=f"Bearer {admin_token}")

    assert response.status_code == 200, response.content
    assert AuditEntry.objects.get(action="key.front_end").actor_name == "sam"
