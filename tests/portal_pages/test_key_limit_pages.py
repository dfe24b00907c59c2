"""A key's own limits on the staff pages: issued with the key, changed on its Limits page, refused
above the tier on the field, shown on the keys page where they hold the key below its tier."""

from __future__ import annotations

import re

import pytest

from fairness.gateway.api_keys import hash_secret
from fairness.models import ApiKey, AuditEntry, KeyLimits, Tier
from fairness.store.keyspace import CONFIG_EPOCH
from tests.support.key_forms import key_form

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = re.compile(r'<code id="secret">(gp-[^<]+)</code>')


def test_staff_issue_a_key_held_below_its_tier(staff_client, cast):
    response = staff_client.post("/staff/keys/issue/", key_form(
        owner="bob", tier="interactive", max_concurrent=1, requests_per_minute=12, allowed_models="m-a"))
    found = SECRET.search(response.content.decode())
    assert found, response.context["form"].errors
    key = ApiKey.objects.get(secret_hash=hash_secret(found.group(1)))
    assert KeyLimits.of(key) == KeyLimits(1, 12, None, ("m-a",))


def test_the_issue_form_refuses_a_figure_above_the_chosen_tier_on_its_field(staff_client, cast):
    Tier.objects.filter(name="batch").update(per_key_concurrency=4)
    before = ApiKey.objects.count()
    response = staff_client.post("/staff/keys/issue/", key_form(owner="bob", tier="interactive", max_concurrent=4))
    assert response.context["form"].errors["max_concurrent"] == [
        "At most 2, the interactive tier's: a key may be given less, never more."]
    assert ApiKey.objects.count() == before
    # The same figure is within the batch tier.
    assert SECRET.search(staff_client.post("/staff/keys/issue/", key_form(
        owner="bob", tier="batch", max_concurrent=4)).content.decode())


def test_the_limits_page_changes_a_key_and_the_keys_page_shows_it(staff_client, cast, redis_client):
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    path = f"/staff/keys/{key.prefix}/limits/"
    assert f'href="{path}"' in staff_client.get("/staff/keys/").content.decode()
    redis_client.delete(CONFIG_EPOCH)
    response = staff_client.post(path, {"max_concurrent": 1, "tokens_per_minute": 2500})
    assert response.status_code == 302
    assert redis_client.get(CONFIG_EPOCH) is not None  # gateways reload the key
    key.refresh_from_db()
    assert KeyLimits.of(key) == KeyLimits(max_concurrent=1, tokens_per_minute=2500)
    assert AuditEntry.objects.get(action="key.limits", target=key.prefix).actor_name == "sam"
    listing = staff_client.get("/staff/keys/").content.decode()
    assert "held below it: 1 at once (tier: 2); 2,500 tokens a minute (tier: no limit)" in listing
    # Emptied, the key has its tier's again and the page says nothing more.
    staff_client.post(path, {})
    assert "held below it" not in staff_client.get("/staff/keys/").content.decode()


def test_the_limits_page_refuses_more_than_the_tier_and_a_revoked_key(staff_client, cast):
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    response = staff_client.post(f"/staff/keys/{key.prefix}/limits/", {"max_concurrent": 3})
    assert response.status_code == 200 and "never more" in response.content.decode()
    key.revoked_at = key.created_at
    key.save(update_fields=["revoked_at"])
    assert staff_client.post(f"/staff/keys/{key.prefix}/limits/", {"max_concurrent": 1}).status_code == 302
    key.refresh_from_db()
    assert key.max_concurrent is None


def test_a_researcher_cannot_open_staffs_limits_page(researcher_client, cast):
    bobs = ApiKey.objects.get(pk=cast["bob"].key_id)
    for method in ("get", "post"):
        response = getattr(researcher_client, method)(f"/staff/keys/{bobs.prefix}/limits/", {"max_concurrent": 1})
        assert response.status_code in (302, 403, 404)
    bobs.refresh_from_db()
    assert bobs.max_concurrent is None
