"""What a researcher cannot do with keys: touch anyone else's, charge an account not theirs,
outlive their tier's limit, hold more than GP_MAX_KEYS_PER_USER, serve themselves on a tier with
self-service off, or post without a CSRF token."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fairness.actions import self_service
from fairness.actions.audit import Actor
from fairness.models import Account, ApiKey, AuditEntry, GroupMapping, Membership, Tier
from fairness.portal.submit_once import new_token
from tests.support.key_forms import default_membership_of, make_key, signed_in

pytestmark = pytest.mark.django_db(transaction=True)
User = get_user_model()


def live_count(username: str) -> int:
    return ApiKey.objects.filter(owner__username=username, revoked_at=None).count()


def test_someone_elses_key_is_not_found_not_forbidden(alice, cast):
    bobs = ApiKey.objects.get(pk=cast["bob"].key_id)
    assert bobs.prefix not in alice.get("/me/keys/").content.decode()
    for path in (f"/me/keys/{bobs.prefix}/rotate/", f"/me/keys/{bobs.prefix}/revoke/"):
        assert alice.get(path).status_code == 404
        assert alice.post(path, {"grace_seconds": 0, "once": new_token()}).status_code == 404
        # Exactly what a prefix that does not exist gets: nothing tells the two apart.
        assert alice.get(path.replace(bobs.prefix, "gp-Nothing1")).status_code == 404
    bobs.refresh_from_db()
    assert bobs.revoked_at is None and ApiKey.objects.filter(owner__username="bob").count() == 1


def test_a_key_cannot_charge_an_account_they_are_not_in(alice, cast):
    lab = Account.objects.create(name="carols-lab")
    carols = Membership.objects.create(account=lab, user=User.objects.get(username="carol"))
    secret, response = make_key(alice, account=carols.pk)
    assert not secret and response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert "carols-lab" not in alice.get("/me/keys/").content.decode()
    with pytest.raises(Exception, match="one of your own accounts"):  # past the form, the rule holds too
        self_service.issue_own(Actor(User.objects.get(username="alice")), "x", 30, carols)
    assert live_count("alice") == 1


def test_the_expiry_is_bounded_by_the_tier(alice):
    Tier.objects.filter(name="interactive").update(max_key_days=30)
    for days in (31, "", 0):
        secret, response = make_key(alice, expires_days=days)
        assert not secret and response.status_code == 200, days
    assert "Ensure this value is less than or equal to 30." in make_key(alice, expires_days=31)[1].content.decode()
    with pytest.raises(self_service.Refused, match="at most 30 days"):
        self_service.issue_own(Actor(User.objects.get(username="alice")), "x", None)
    assert make_key(alice, expires_days=30)[0]


def test_no_expiry_only_on_a_tier_without_a_limit(alice):
    secret, _ = make_key(alice, expires_days="")
    assert ApiKey.objects.get(label="laptop").expires_at is None and secret


def test_no_more_live_keys_than_the_setting_allows(alice, cast, settings):
    settings.GP_MAX_KEYS_PER_USER = 2  # alice holds one already
    assert make_key(alice, label="second")[0]
    secret, refused = make_key(alice, label="third")
    assert not secret and refused.status_code == 403
    assert "You have 2 live keys, the most anyone may hold" in refused.content.decode()
    assert live_count("alice") == 2

    # A grace period would hold three at once; a rotation at once would not.
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    graced = alice.post(f"/me/keys/{key.prefix}/rotate/", {"grace_seconds": 3600, "once": new_token()}, follow=True)
    assert "a grace period keeps the old one live" in graced.content.decode() and live_count("alice") == 2
    at_once = alice.post(f"/me/keys/{key.prefix}/rotate/", {"grace_seconds": 0, "once": new_token()})
    assert at_once.status_code == 200 and live_count("alice") == 2

    # Revoking one frees a place.
    alice.post(f"/me/keys/{ApiKey.objects.get(label='second').prefix}/revoke/")
    assert make_key(alice, label="third")[0]


def test_no_self_service_on_a_tier_with_it_off_but_the_owner_may_still_revoke(alice, cast):
    Tier.objects.filter(name="interactive").update(self_service_keys=False)
    page = alice.get("/me/keys/").content.decode()
    assert "Keys of tier interactive are managed by staff" in page and "Make key" not in page
    assert "/rotate/" not in page and "rotated by staff" in page

    secret, refused = make_key(alice)
    assert not secret and refused.status_code == 403
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    rotated = alice.post(f"/me/keys/{key.prefix}/rotate/", {"grace_seconds": 0, "once": new_token()}, follow=True)
    assert "rotated by staff" in rotated.content.decode()
    key.refresh_from_db()
    assert key.revoked_at is None and live_count("alice") == 1

    # A secret that leaked is stopped by whoever sees it, whatever the tier says.
    assert f"/me/keys/{key.prefix}/revoke/" in page
    alice.post(f"/me/keys/{key.prefix}/revoke/")
    key.refresh_from_db()
    assert key.revoked_at is not None and live_count("alice") == 0
    assert AuditEntry.objects.filter(action="key.revoke", target=key.prefix).exists()


def test_without_a_live_key_or_a_mapped_group_staff_issue_the_first(cast):
    User.objects.create_user("dave")
    dave = signed_in("dave")
    assert "Your first key is issued by staff" in dave.get("/me/keys/").content.decode()
    secret, refused = make_key(dave)
    assert not secret and refused.status_code == 403
    assert not ApiKey.objects.filter(owner__username="dave").exists()


def test_a_mapped_group_gives_the_tier_of_a_first_key(cast):
    dave_user = User.objects.create_user("dave")
    lab = Account.objects.create(name="lab")
    Membership.objects.create(account=lab, user=dave_user, is_default=True)
    GroupMapping.objects.create(group="cn=lab", account=lab, tier=Tier.objects.get(name="batch"))
    secret, response = make_key(signed_in("dave"))
    assert secret, response.content
    key = ApiKey.objects.get(owner=dave_user)
    assert (key.tier.name, key.membership.account.name, key.created_by) == ("batch", "lab", dave_user)


def test_their_live_key_decides_the_tier(alice):
    alice_user = User.objects.get(username="alice")
    GroupMapping.objects.create(group="cn=nlp", account=default_membership_of("alice").account,
                                tier=Tier.objects.get(name="batch"))
    assert self_service.own_tier(alice_user, self_service.timezone.now()).name == "interactive"


def test_the_forms_need_a_csrf_token(cast):
    strict = signed_in("alice", enforce_csrf_checks=True)
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    assert make_key(strict)[1].status_code == 403
    assert strict.post(f"/me/keys/{key.prefix}/revoke/").status_code == 403
    assert strict.post(f"/me/keys/{key.prefix}/rotate/", {"grace_seconds": 0, "once": new_token()}).status_code == 403
    key.refresh_from_db()
    assert key.revoked_at is None and live_count("alice") == 1


def test_signed_out_visitors_are_sent_to_sign_in(client, cast):
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    for path in ("/me/keys/", f"/me/keys/{key.prefix}/revoke/"):
        response = client.post(path)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    key.refresh_from_db()
    assert key.revoked_at is None


def test_someone_deactivated_after_signing_in_is_refused_not_an_error(alice):
    # The request was let in as active; staff deactivate them before the key is made.
    researcher = User.objects.get(username="alice")
    User.objects.filter(pk=researcher.pk).update(is_active=False)
    with pytest.raises(self_service.Refused, match="no longer active"):
        self_service.issue_own(Actor(researcher), "late", 30)
    assert live_count("alice") == 1
