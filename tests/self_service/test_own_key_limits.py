"""A researcher narrows their own keys on /me/keys/: within their tier, never above it, never
anyone else's key, and not on a tier whose keys staff manage."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fairness.actions import self_service
from fairness.actions.audit import Actor
from fairness.models import ApiKey, AuditEntry, KeyLimits, Tier
from tests.support.key_forms import make_key

pytestmark = pytest.mark.django_db(transaction=True)


def limits_of(member) -> KeyLimits:
    return KeyLimits.of(ApiKey.objects.get(pk=member.key_id))


def prefix_of(member) -> str:
    return ApiKey.objects.get(pk=member.key_id).prefix


def test_a_researcher_narrows_their_own_key_and_the_page_says_so(alice, cast):
    path = f"/me/keys/{prefix_of(cast['alice'])}/limits/"
    page = alice.get(path).content.decode()
    assert "At most 2, tier interactive" in page
    response = alice.post(path, {"max_concurrent": 1, "requests_per_minute": 30, "allowed_models": "m-a, m-b"})
    assert response.status_code == 302
    assert limits_of(cast["alice"]) == KeyLimits(1, 30, None, ("m-a", "m-b"))
    entry = AuditEntry.objects.get(action="key.limits")
    assert entry.actor_name == "alice" and entry.target == prefix_of(cast["alice"])
    keys_page = alice.get("/me/keys/").content.decode()
    assert "1 at once (tier: 2)" in keys_page and "models: m-a, m-b" in keys_page


def test_a_researcher_cannot_widen_their_key_beyond_the_tier(alice, cast):
    Tier.objects.filter(name="interactive").update(key_tokens_per_minute=10_000, allowed_models=["m-a", "m-b"])
    path = f"/me/keys/{prefix_of(cast['alice'])}/limits/"
    response = alice.post(path, {"max_concurrent": 3, "tokens_per_minute": 20_000, "allowed_models": "m-a m-c"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "At most 2, the interactive tier&#x27;s: a key may be given less, never more." in page
    assert "At most 10,000, the interactive tier&#x27;s" in page
    assert "m-c: not among the interactive tier&#x27;s models" in page
    assert limits_of(cast["alice"]) == KeyLimits()
    # Past the page, the action holds the same line.
    alices = ApiKey.objects.select_related("tier").get(pk=cast["alice"].key_id)
    with pytest.raises(Exception, match="max_concurrent"):
        self_service.set_own_limits(Actor(alices.owner), alices, KeyLimits(max_concurrent=3))
    assert not AuditEntry.objects.filter(action="key.limits").exists()


def test_a_new_key_is_made_with_limits_within_the_tier_and_refused_above_it(alice, cast):
    secret, response = make_key(alice, max_concurrent=5)
    assert not secret and "At most 2" in response.content.decode()
    secret, _ = make_key(alice, max_concurrent=1, allowed_models="m-a")
    assert secret
    made = ApiKey.objects.get(prefix=secret[:11])
    assert KeyLimits.of(made) == KeyLimits(max_concurrent=1, allowed_models=("m-a",))


def test_someone_elses_keys_limits_are_not_found_and_stay_as_they_were(alice, cast):
    bobs = prefix_of(cast["bob"])
    assert alice.get(f"/me/keys/{bobs}/limits/").status_code == 404
    assert alice.post(f"/me/keys/{bobs}/limits/", {"max_concurrent": 1}).status_code == 404
    assert alice.get("/me/keys/gp-Nothing1/limits/").status_code == 404  # the same as no key at all
    assert limits_of(cast["bob"]) == KeyLimits()
    # Nor do staff's pages or the admin API open to a researcher.
    assert alice.post(f"/staff/keys/{bobs}/limits/", {"max_concurrent": 1}).status_code in (302, 403)
    patched = alice.patch(f"/api/admin/keys/{bobs}", data='{"max_concurrent": 1}', content_type="application/json")
    assert patched.status_code == 401
    assert limits_of(cast["bob"]) == KeyLimits()


def test_on_a_tier_staff_manage_the_limits_are_staffs(alice, cast):
    Tier.objects.filter(name="interactive").update(self_service_keys=False)
    path = f"/me/keys/{prefix_of(cast['alice'])}/limits/"
    response = alice.post(path, {"max_concurrent": 1})
    assert response.status_code == 302
    assert "are set by staff" in alice.get("/me/keys/").content.decode()
    assert f'href="{path}"' not in alice.get("/me/keys/").content.decode()
    assert limits_of(cast["alice"]) == KeyLimits()
    User = get_user_model()
    alices = ApiKey.objects.select_related("tier").get(pk=cast["alice"].key_id)
    with pytest.raises(self_service.Refused):
        self_service.set_own_limits(Actor(User.objects.get(username="alice")), alices, KeyLimits(max_concurrent=1))
