"""The playground's key (/me/playground/key): one per signed-in session, the same secret on every
page load, stored only as its hash, ending with the session, revoked at sign-out, and given to
nobody but the session's own person, signed in, with a CSRF token."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from fairness.accounting import key_expiry
from fairness.actions import playground
from fairness.actions.audit import Actor
from fairness.gateway.api_keys import hash_secret
from fairness.models import ApiKey, AuditEntry, Tier
from tests.support.key_forms import make_key, signed_in

pytestmark = pytest.mark.django_db(transaction=True)
User = get_user_model()
KEY_URL = "/me/playground/key"


def key_of(client: Client) -> str:
    response = client.post(KEY_URL)
    assert response.status_code == 200, response.content
    return json.loads(response.content)["key"]


def playground_keys(username: str) -> list[ApiKey]:
    return list(ApiKey.objects.filter(owner__username=username, label=playground.LABEL))


def session_of(client: Client) -> Session:
    return Session.objects.get(session_key=client.session.session_key)


def test_one_key_per_session_with_the_same_secret_on_every_load(alice):
    first = key_of(alice)
    assert alice.get("/me/playground/").status_code == 200
    again = key_of(alice)
    assert first == again and first.startswith("gp-")
    [key] = playground_keys("alice")
    assert key.secret_hash == hash_secret(first) and key.prefix == first[:11]
    assert AuditEntry.objects.filter(action="key.playground", target=key.prefix).count() == 1
    # Charged like any of her keys: her tier and her default account.
    assert key.tier.name == "interactive" and key.membership is not None and key.membership.is_default


def test_the_secret_is_kept_nowhere_but_as_its_hash(alice):
    page = alice.get("/me/playground/").content.decode()
    response = alice.post(KEY_URL)
    secret = json.loads(response.content)["key"]
    assert "no-store" in response["Cache-Control"]
    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    stored = [str(getattr(key, field.attname)) for field in ApiKey._meta.concrete_fields]
    assert secret not in page and not any(secret in value for value in stored)
    assert not any(secret in json.dumps(entry.detail) for entry in AuditEntry.objects.all())
    assert secret not in json.dumps(session_of(alice).get_decoded())
    listing = alice.get("/me/keys/").content.decode()
    assert secret not in listing and key.prefix in listing  # listed among her keys, by its prefix alone


def test_signing_out_revokes_it_and_a_new_session_gets_another(cast):
    from tests.support.cast import ALICE_PASSWORD

    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    browser = Client()
    assert browser.login(username="alice", password=ALICE_PASSWORD)
    first = key_of(browser)
    browser.post("/accounts/logout/")
    key = ApiKey.objects.get(secret_hash=hash_secret(first))
    assert key.revoked_at is not None
    assert AuditEntry.objects.filter(action="key.revoke", target=key.prefix, actor=alice).exists()
    assert browser.post(KEY_URL).status_code == 401  # signed out: no key at all

    assert browser.login(username="alice", password=ALICE_PASSWORD)
    second = key_of(browser)
    assert second != first and ApiKey.objects.get(secret_hash=hash_secret(second)).revoked_at is None


def test_a_new_password_ends_the_keys_of_every_session(cast):
    from tests.support.cast import ALICE_PASSWORD

    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    here, elsewhere = Client(), Client()
    assert here.login(username="alice", password=ALICE_PASSWORD)
    assert elsewhere.login(username="alice", password=ALICE_PASSWORD)
    old_here, old_elsewhere = key_of(here), key_of(elsewhere)
    changed = here.post("/accounts/password/", {"old_password": ALICE_PASSWORD, "new_password1": "a new long password",
                                                "new_password2": "a new long password"})
    assert changed.status_code == 302
    for secret in (old_here, old_elsewhere):
        assert ApiKey.objects.get(secret_hash=hash_secret(secret)).revoked_at is not None
    assert elsewhere.post(KEY_URL).status_code == 401  # signed out there, as Django does
    new_here = key_of(here)  # still signed in here, with a session key of its own now
    assert new_here not in (old_here, old_elsewhere)
    assert [k.revoked_at for k in playground_keys("alice") if k.secret_hash == hash_secret(new_here)] == [None]


def test_a_rotated_secret_key_ends_the_key_made_under_the_old_one(alice, settings):
    before = key_of(alice)
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "another long secret key for the portal, rotated in"
    after = key_of(alice)  # the session is still good (the fallback signed it), under a new key
    assert after != before and len(playground_keys("alice")) == 2
    assert ApiKey.objects.get(secret_hash=hash_secret(before)).revoked_at is not None
    alice.post("/accounts/logout/")
    assert ApiKey.objects.get(secret_hash=hash_secret(after)).revoked_at is not None
    settings.SECRET_KEY = settings.SECRET_KEY_FALLBACKS[0]


def test_it_expires_when_the_session_does(alice):
    session = alice.session
    session.set_expiry(600)
    session.save()
    secret = key_of(alice)
    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    ends = session_of(alice).expire_date
    assert key.expires_at == ends
    assert abs((ends - timezone.now()).total_seconds() - 600) < 30
    assert not key.is_expired(ends - dt.timedelta(seconds=1)) and key.is_expired(ends)


def test_a_session_moved_on_later_takes_its_key_along(alice):
    session = alice.session
    session.set_expiry(600)
    session.save()
    secret = key_of(alice)
    session = alice.session
    session.set_expiry(3600)  # something else gives the session longer
    session.save()
    assert key_of(alice) == secret
    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    assert key.expires_at == session_of(alice).expire_date
    assert key.expires_at is not None and key.expires_at > timezone.now() + dt.timedelta(minutes=50)
    assert AuditEntry.objects.filter(action="key.playground.extend", target=key.prefix).count() == 1


def test_a_session_of_the_default_age_is_pinned_so_the_key_ends_with_it(alice, settings):
    secret = key_of(alice)
    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    assert key.expires_at == session_of(alice).expire_date
    alice.get("/me/keys/")  # later requests do not move the session past its key
    assert key_of(alice) == secret
    assert ApiKey.objects.get(pk=key.pk).expires_at == session_of(alice).expire_date


def test_it_lives_no_longer_than_the_tiers_longest_key(alice):
    Tier.objects.filter(name="interactive").update(max_key_days=1)
    key = ApiKey.objects.get(secret_hash=hash_secret(key_of(alice)))
    assert key.expires_at is not None
    assert key.expires_at <= timezone.now() + dt.timedelta(days=1) < session_of(alice).expire_date


def test_another_persons_session_gets_its_own_key_and_cannot_reach_hers(alice, bob):
    hers, his = key_of(alice), key_of(bob)
    assert hers != his
    assert [k.secret_hash for k in playground_keys("alice")] == [hash_secret(hers)]
    assert [k.secret_hash for k in playground_keys("bob")] == [hash_secret(his)]
    # Even named outright, her session's key is not his to take.
    with pytest.raises(playground.Refused, match="not yours"):
        playground.key_for_session(Actor(User.objects.get(username="bob")), alice.session.session_key,
                                   timezone.now() + dt.timedelta(days=1))
    # Nor to end: his signing out leaves hers alone.
    bob.post("/accounts/logout/")
    assert playground_keys("bob")[0].revoked_at is not None
    assert playground_keys("alice")[0].revoked_at is None
    assert playground.end_session(Actor(User.objects.get(username="bob")), User.objects.get(username="bob"),
                                  alice.session.session_key) is None
    assert playground_keys("alice")[0].revoked_at is None


def test_someone_without_access_gets_no_key(cast):
    User.objects.create_user("dave")  # no key, no account with a tier: staff issue his first key
    dave = signed_in("dave")
    refused = dave.post(KEY_URL)
    assert refused.status_code == 403
    assert json.loads(refused.content)["error"]["code"] == "playground_refused"
    assert "issued by staff" in json.loads(refused.content)["error"]["message"]
    page = dave.get("/me/playground/").content.decode()
    assert "issued by staff" in page and "playground.js" not in page
    assert not ApiKey.objects.filter(owner__username="dave").exists()


def test_a_tier_whose_keys_staff_manage_opens_no_playground(alice):
    Tier.objects.filter(name="interactive").update(self_service_keys=False)
    assert alice.post(KEY_URL).status_code == 403 and not playground_keys("alice")


def test_a_request_not_signed_in_is_refused(cast):
    anonymous = Client()
    refused = anonymous.post(KEY_URL)
    assert refused.status_code == 401
    assert json.loads(refused.content)["error"]["type"] == "authentication_error"
    assert anonymous.get("/me/playground/").status_code == 302
    assert not ApiKey.objects.filter(label=playground.LABEL).exists()


def test_the_key_is_only_answered_to_a_post_with_a_csrf_token(cast):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.get(username="alice"))
    assert strict.get(KEY_URL).status_code == 405
    assert strict.post(KEY_URL).status_code == 403
    assert not playground_keys("alice")
    page = strict.get("/me/playground/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    answered = strict.post(KEY_URL, HTTP_X_CSRFTOKEN=token.group(1))
    assert answered.status_code == 200 and len(playground_keys("alice")) == 1


def test_a_revoked_playground_key_stays_revoked_for_the_session(alice):
    secret = key_of(alice)
    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    alice.post(f"/me/keys/{key.prefix}/revoke/")
    refused = alice.post(KEY_URL)
    assert refused.status_code == 403 and "revoked" in json.loads(refused.content)["error"]["message"]
    assert "revoked" in alice.get("/me/playground/").content.decode()
    assert len(playground_keys("alice")) == 1


def test_it_is_not_one_of_the_keys_she_holds(alice, settings):
    settings.GP_MAX_KEYS_PER_USER = 2  # she holds one
    session = alice.session
    session.set_expiry(24 * 3600)  # a day: within the week a key's expiry is warned of
    session.save()
    prefix = key_of(alice)[:11]
    assert make_key(alice, label="second")[0]  # the playground's took no place
    rotate = alice.get(f"/me/keys/{prefix}/rotate/", follow=True)  # nothing to rotate
    assert "it ends with the session" in rotate.content.decode()
    assert ApiKey.objects.filter(owner__username="alice").count() == 3
    User.objects.filter(username="alice").update(email="alice@example.org")
    assert not key_expiry.due(timezone.now()).filter(prefix=prefix).exists()  # no "about to expire" mail
    assert 'id="expiring-heading"' not in alice.get("/me/").content.decode()
    ApiKey.objects.filter(label="second").update(expires_at=timezone.now() + dt.timedelta(days=1))
    assert 'id="expiring-heading"' in alice.get("/me/").content.decode()  # a key she holds is warned of
