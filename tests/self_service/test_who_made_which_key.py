"""Staff see who made each key (on the keys page and in the admin API), and switch self-service
and the longest key life per tier on the tier form and the API."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from fairness.models import ApiKey, AuditEntry, Tier
from fairness.portal.submit_once import new_token
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


def test_a_commands_key_names_who_ran_it_and_a_rotated_key_names_its_successor(staff_client, alice):
    call_command("issue_key", user="bob", tier="interactive", label="cron", stdout=io.StringIO())
    cron = ApiKey.objects.get(label="cron")
    entry = AuditEntry.objects.get(action="key.issue", target=cron.prefix)
    assert cron.created_by is None and cron.made_by_command == entry.actor_name
    assert entry.actor_name.startswith("os:")

    rotated = staff_client.post(f"/api/admin/keys/{cron.prefix}/rotate", data=json.dumps({}),
                                content_type="application/json")
    new_prefix = rotated.json()["key"]["prefix"]
    rows = {row["prefix"]: row for row in staff_client.get("/api/admin/keys").json()}
    assert rows[cron.prefix]["replaced_by"] == new_prefix and rows[cron.prefix]["revoked_at"] is not None
    assert rows[cron.prefix]["created_by"] == entry.actor_name
    assert rows[new_prefix]["replaced_by"] is None and rows[new_prefix]["created_by"] == "sam"
    page = staff_client.get("/staff/keys/?state=all").content.decode()
    assert f'replaced by <a href="/staff/keys/?q={new_prefix}&amp;state=all"><code>{new_prefix}…</code></a>' in page
    assert f"made by {entry.actor_name}" in page

    # A researcher's own rotation, on their page: the old row links to the new one.
    make_key(alice, label="laptop")
    laptop = ApiKey.objects.get(label="laptop").prefix
    assert alice.post(f"/me/keys/{laptop}/rotate/", {"grace_seconds": 0, "once": new_token()}).status_code == 200
    mine = alice.get("/me/keys/").content.decode()
    successor = ApiKey.objects.get(label="laptop", revoked_at=None).prefix
    assert f'replaced by <a href="#key-{successor}">' in mine and f'id="key-{successor}"' in mine


def test_the_tier_form_and_api_switch_self_service(staff_client, tiers):
    form = staff_client.get("/staff/tiers/batch/edit/").content.decode()
    assert "Its users make and rotate their own keys" in form
    response = staff_client.post("/staff/tiers/batch/edit/", {
        "description": "", "per_key_concurrency": 1, "pool_concurrency": 2, "head_start_seconds": 0,
        "max_queue_wait_seconds": 600, "max_queued_per_key": 64, "engine_priority": 0, "allowed_models": "",
        "max_key_days": 14, "fairshare_weight_seconds": 300,  # self_service_keys left unticked: off
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
