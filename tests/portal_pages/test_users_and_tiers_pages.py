"""Users and tiers through the pages: creation, the set-password step, tier moves, validation."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fairness.models import ApiKey, AuditEntry, Tier

pytestmark = pytest.mark.django_db(transaction=True)
User = get_user_model()

TIER = {
    "name": "gold", "description": "Paid for", "per_key_concurrency": 4, "pool_concurrency": 8,
    "head_start_seconds": 30, "max_queue_wait_seconds": 120, "max_queued_per_key": 16, "engine_priority": 0,
    "queue_events": "on", "fairshare_weight_seconds": 300,
}


def test_a_user_created_with_a_password_can_sign_in(staff_client, cast):
    response = staff_client.post("/staff/users/new/", {
        "username": "dora", "email": "dora@example.org",
        "password1": "correct horse battery", "password2": "correct horse battery",
    })
    assert response.status_code == 302 and response["Location"] == "/staff/users/"
    dora = User.objects.get(username="dora")
    assert not dora.is_staff and dora.email == "dora@example.org"
    assert Client().login(username="dora", password="correct horse battery")


def test_a_user_created_without_a_password_goes_through_the_set_password_step(staff_client, cast):
    response = staff_client.post("/staff/users/new/", {"username": "eve"})
    assert response["Location"] == "/staff/users/eve/password/"
    eve = User.objects.get(username="eve")
    assert not eve.is_staff and not eve.has_usable_password()
    assert "no password" in staff_client.get("/staff/users/").content.decode()

    too_short = staff_client.post("/staff/users/eve/password/", {"new_password1": "short", "new_password2": "short"})
    assert too_short.status_code == 200 and "new_password2" in too_short.context["form"].errors
    done = staff_client.post("/staff/users/eve/password/",
                             {"new_password1": "a much longer one", "new_password2": "a much longer one"})
    assert done.status_code == 302
    assert Client().login(username="eve", password="a much longer one")


@pytest.mark.parametrize(("fields", "field"), [
    ({"username": "alice"}, "username"),  # taken
    ({"username": "has space"}, "username"),
    ({"username": "fay", "password1": "correct horse battery", "password2": "other horse battery"}, "password2"),
    ({"username": "fay", "password1": "password", "password2": "password"}, "password1"),  # too common
])
def test_user_creation_errors_name_the_field(staff_client, cast, fields, field):
    response = staff_client.post("/staff/users/new/", fields)
    assert response.status_code == 200
    assert field in response.context["form"].errors
    assert not User.objects.filter(username="fay").exists()


def test_changing_a_users_tier_moves_every_live_key(staff_client, cast):
    alice = User.objects.get(username="alice")
    ApiKey.objects.filter(owner=alice).update(revoked_at=None)
    response = staff_client.post("/staff/users/alice/tier/", {"tier": "batch"}, follow=True)
    assert "Moved 1 live key(s) of alice to batch" in response.content.decode()
    assert set(ApiKey.objects.filter(owner=alice).values_list("tier__name", flat=True)) == {"batch"}


def test_a_new_tier_is_created_from_the_form(staff_client, cast):
    response = staff_client.post("/staff/tiers/new/", TIER)
    assert response.status_code == 302
    gold = Tier.objects.get(name="gold")
    assert (gold.per_key_concurrency, gold.pool_concurrency, gold.head_start_seconds) == (4, 8, 30.0)
    html = staff_client.get("/staff/tiers/").content.decode()
    assert "<li>Each person runs up to 4 requests at a time, across all their gold keys and any front end that " \
        "speaks for them.</li><li>All gold keys together run up to 8 requests" in html


def test_a_tier_bound_on_its_queue_is_set_on_the_form_and_said_in_its_policy(staff_client, cast):
    response = staff_client.post("/staff/tiers/new/", {**TIER, "max_queued": 100})
    assert response.status_code == 302
    assert Tier.objects.get(name="gold").max_queued == 100
    policy = staff_client.get("/staff/tiers/").content.decode()
    assert "16 requests per person may wait, 100 requests across all gold keys" in policy
    edit = staff_client.get("/staff/tiers/gold/edit/").content.decode()
    assert "Queued requests across the tier" in edit and 'name="max_queued" value="100"' in edit
    assert staff_client.post("/staff/tiers/gold/edit/", {**TIER, "max_queued": ""}).status_code == 302
    assert Tier.objects.get(name="gold").max_queued is None  # empty: no tier bound


def test_every_policy_is_on_the_tier_form_said_in_its_policy_and_audited(staff_client, cast):
    form = staff_client.get("/staff/tiers/new/").content.decode()
    for label in ("Fair-share weight (seconds)", "Requests a minute per person", "Weighted tokens a minute per person",
                  "Requests a minute across the tier", "Weighted tokens a minute across the tier",
                  "Tell waiting streams their place"):
        assert label in form, label
    limits = {"key_requests_per_minute": 30, "key_tokens_per_minute": 90000, "requests_per_minute": "",
              "tokens_per_minute": 1000000, "fairshare_weight_seconds": 60}
    body = {key: value for key, value in {**TIER, **limits}.items() if key != "queue_events"}  # unticked
    assert staff_client.post("/staff/tiers/new/", body).status_code == 302
    gold = Tier.objects.get(name="gold")
    assert (gold.key_requests_per_minute, gold.key_tokens_per_minute, gold.requests_per_minute,
            gold.tokens_per_minute) == (30, 90000, None, 1000000)
    assert (gold.fairshare_weight_seconds, gold.queue_events) == (60.0, False)
    policy = staff_client.get("/staff/tiers/").content.decode()
    assert "each person at most 30 requests a minute (up to 2 at once, then one every 2 s)" in policy
    assert "as if it had waited up to 1 minute less" in policy
    detail = AuditEntry.objects.get(action="tier.create", target="gold").detail
    assert (detail["key_requests_per_minute"], detail["fairshare_weight_seconds"], detail["queue_events"]) == (
        30, 60.0, False)


@pytest.mark.parametrize(("change", "field"), [
    ({"per_key_concurrency": 0}, "per_key_concurrency"),
    ({"pool_concurrency": 0}, "pool_concurrency"),
    ({"per_key_concurrency": 4, "pool_concurrency": 2}, "pool_concurrency"),  # Tier.clean
    ({"head_start_seconds": -1}, "head_start_seconds"),
    ({"max_queued_per_key": 0}, "max_queued_per_key"),
    ({"max_queued": 0}, "max_queued"),
    ({"per_key_concurrency": "many"}, "per_key_concurrency"),
    ({"key_requests_per_minute": 0}, "key_requests_per_minute"),
    ({"fairshare_weight_seconds": -1}, "fairshare_weight_seconds"),
])
def test_tier_edits_are_validated_with_errors_on_the_fields(staff_client, cast, change, field):
    before = Tier.objects.get(name="batch")
    response = staff_client.post("/staff/tiers/batch/edit/", {**TIER, "name": "batch", **change})
    assert response.status_code == 200
    form = response.context["form"]
    assert list(form.errors) == [field]
    html = response.content.decode()
    assert 'class="errorlist' in html and 'aria-invalid="true"' in html
    after = Tier.objects.get(name="batch")
    assert (after.per_key_concurrency, after.pool_concurrency, after.head_start_seconds) == (
        before.per_key_concurrency, before.pool_concurrency, before.head_start_seconds)


def test_a_tier_keeps_its_name_when_edited(staff_client, cast):
    response = staff_client.post("/staff/tiers/batch/edit/", {**TIER, "name": "renamed", "pool_concurrency": ""})
    assert response.status_code == 302
    batch = Tier.objects.get(name="batch")
    assert batch.pool_concurrency is None and batch.per_key_concurrency == 4
    assert not Tier.objects.filter(name="renamed").exists()


def test_a_second_tier_with_the_same_name_is_refused(staff_client, cast):
    response = staff_client.post("/staff/tiers/new/", {**TIER, "name": "batch"})
    assert response.status_code == 200 and "name" in response.context["form"].errors
