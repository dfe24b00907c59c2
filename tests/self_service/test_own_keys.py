"""A researcher makes, rotates and revokes their own keys on /me/keys/; the secret is shown once."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fairness.gateway.api_keys import hash_secret
from fairness.models import Account, ApiKey, AuditEntry, Membership
from fairness.portal.submit_once import new_token
from tests.support.key_forms import User, default_membership_of, make_key

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_researcher_makes_a_key_and_sees_its_secret_once(alice):
    page = alice.get("/me/keys/")
    assert page.status_code == 200
    assert "In tier <strong>interactive</strong>, the tier of your keys" in page.content.decode()

    secret, response = make_key(alice, label="laptop", expires_days=30)
    assert response.status_code == 200 and secret.startswith("gp-")
    assert "no-store" in response["Cache-Control"]
    html = response.content.decode()
    assert "cannot be shown again" in html and 'data-copy="secret"' in html and "Back to my keys" in html

    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    alice_user = User.objects.get(username="alice")
    assert (key.owner, key.created_by, key.tier.name, key.label) == (alice_user, alice_user, "interactive", "laptop")
    assert key.membership == default_membership_of("alice")
    assert key.expires_at is not None
    assert abs(key.expires_at - (timezone.now() + dt.timedelta(days=30))) < dt.timedelta(minutes=1)
    entry = AuditEntry.objects.get(action="key.issue", target=key.prefix)
    assert entry.actor == alice_user and entry.detail["owner"] == "alice"

    for later in ("/me/keys/", "/me/", "/me/usage/"):
        body = alice.get(later).content.decode()
        assert secret not in body and secret[11:] not in body
    assert key.prefix in alice.get("/me/keys/").content.decode()
    assert secret not in str(dict(alice.session.items()))


def test_sending_the_form_twice_makes_one_key(alice):
    fields = {"label": "twice", "expires_days": 30, "once": new_token()}
    first = alice.post("/me/keys/", fields)
    again = alice.post("/me/keys/", fields, follow=True)
    assert first.status_code == 200
    assert ApiKey.objects.filter(owner__username="alice", label="twice").count() == 1
    assert "nothing new was issued" in again.content.decode()


def test_a_key_can_charge_another_account_of_theirs(alice):
    lab = Account.objects.create(name="lab")
    other = Membership.objects.create(account=lab, user=User.objects.get(username="alice"))
    page = alice.get("/me/keys/").content.decode()
    assert "lab" in page and "(default)" in page

    secret, response = make_key(alice, account=other.pk)
    assert response.status_code == 200, response.content
    assert ApiKey.objects.get(secret_hash=hash_secret(secret)).membership == other


def test_a_researcher_rotates_their_key_with_a_grace_period(alice, cast):
    old = ApiKey.objects.get(pk=cast["alice"].key_id)
    page = alice.get(f"/me/keys/{old.prefix}/rotate/")
    assert page.status_code == 200 and "Stop the old secret" in page.content.decode()

    response = alice.post(f"/me/keys/{old.prefix}/rotate/", {"grace_seconds": 3600, "once": new_token()})
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    assert "Key rotated" in response.content.decode()
    old.refresh_from_db()
    new = ApiKey.objects.exclude(pk=old.pk).get(owner__username="alice")
    assert old.revoked_at is None and old.expires_at is not None
    assert old.expires_at <= timezone.now() + dt.timedelta(hours=1)
    assert (new.label, new.tier_id, new.created_by.username) == (old.label, old.tier_id, "alice")
    assert AuditEntry.objects.filter(action="key.rotate", target=old.prefix, actor__username="alice").exists()

    # In its grace the old key is not rotated a second time: its successor exists.
    again = alice.get(f"/me/keys/{old.prefix}/rotate/", follow=True)
    assert "rotated already" in again.content.decode()


def test_a_rotated_key_stays_within_the_tiers_longest_life(alice, cast):
    old = ApiKey.objects.select_related("tier").get(pk=cast["alice"].key_id)  # issued by staff: no expiry
    old.tier.max_key_days = 30
    old.tier.save()
    alice.post(f"/me/keys/{old.prefix}/rotate/", {"grace_seconds": 0, "once": new_token()})
    new = ApiKey.objects.get(owner__username="alice", revoked_at=None)
    assert new.expires_at is not None and new.expires_at <= timezone.now() + dt.timedelta(days=30)
    old.refresh_from_db()
    assert old.revoked_at is not None


def test_a_researcher_revokes_their_own_key(alice, cast):
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    confirm = alice.get(f"/me/keys/{key.prefix}/revoke/")
    assert confirm.status_code == 200 and "cannot be undone" in confirm.content.decode()

    done = alice.post(f"/me/keys/{key.prefix}/revoke/", follow=True)
    assert f"Revoked {key.prefix}…" in done.content.decode()
    key.refresh_from_db()
    assert key.revoked_at is not None
    entry = AuditEntry.objects.get(action="key.revoke", target=key.prefix)
    assert entry.actor.username == "alice"
