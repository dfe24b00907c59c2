"""Staff see who made each key (on the keys page and in the admin API), and switch self-service
and the longest key life per tier on the tier form and the API."""

from __future__ import annotations

import json

import pytest

from fairness.models import ApiKey, Tier
from tests.support.key_forms import key_form, make_key

pytestmark = pytest.mark.django_db(transaction=True)


def test_staff_see_who_made_each_key(staff_client, alice):
    make_key(alice, label="laptop")
    issued = staff_client.post("/staff/keys/issue/", key_form(owner="bob", tier="interactive", label="eval"))
    assert issued.status_code == 200
    assert ApiKey.objects.get(label="eval").created_by.username == "sam"

    page = staff_client.get("/staff/keys/").content.decode()
    assert "made by themselves" in page and "made by sam" in page
    rows = {row["label"]: row for row in staff_client.get("/api/admin/keys").json()}
    assert rows["laptop"]["created_by"] == "alice"
    assert rows["eval"]["created_by"] == "sam"
    assert rows["alice's key"]["created_by"] is None  # issued by a command (the test's set-up)


def test_the_tier_form_and_api_switch_self_service(staff_client, tiers):
    form = staff_client.get("/staff/tiers/batch/edit/").content.decode()
    assert "Its users make and rotate their own keys" in form
    response = staff_client.post("/staff/tiers/batch/edit/", {
        "description": "", "per_key_concurrency": 1, "pool_concurrency": 2, "head_start_seconds": 0,
        "max_queue_wait_seconds": 600, "max_queued_per_key": 64, "engine_priority": 0, "allowed_models": "",
        "max_key_days": 14,  # self_service_keys left unticked: off
    })
    assert response.status_code == 302, response.content
    batch = Tier.objects.get(name="batch")
    assert (batch.self_service_keys, batch.max_key_days) == (False, 14)

    patched = staff_client.patch("/api/admin/tiers/batch", data=json.dumps({"self_service_keys": True,
                                                                            "clear_max_key_days": True}),
                                 content_type="application/json")
    assert patched.status_code == 200, patched.content
    assert (patched.json()["self_service_keys"], patched.json()["max_key_days"]) == (True, None)
    listed = {t["name"]: t for t in staff_client.get("/api/admin/tiers").json()}
    assert listed["batch"]["self_service_keys"] is True
