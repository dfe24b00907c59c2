"""Keys through the pages: the secret on one page only, revocation confirmed, rotation with grace."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.gateway.api_keys import hash_secret
from fairness.models import Account, ApiKey, AuditEntry, Membership
from tests.support.key_forms import key_form

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = re.compile(r'<code id="secret">(gp-[^<]+)</code>')


def issue(client, **fields) -> tuple[str, object]:
    response = client.post("/staff/keys/issue/", key_form(owner="carol", tier="batch", **fields))
    assert response.status_code == 200, response.content
    return SECRET.search(response.content.decode()).group(1), response


def test_the_secret_is_on_the_result_page_once_and_nowhere_after(staff_client, cast):
    secret, response = issue(staff_client, label="nightly eval", expires_days=30)
    html = response.content.decode()
    assert "cannot be shown again" in html
    assert 'data-copy="secret"' in html
    assert "no-store" in response["Cache-Control"]
    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    assert (key.owner.username, key.tier.name, key.label) == ("carol", "batch", "nightly eval")
    assert 29 <= (key.expires_at - timezone.now()).days <= 30

    # The list, the dashboard and a reload of the form show the prefix, never the secret.
    listing = staff_client.get("/staff/keys/").content.decode()
    assert key.prefix in listing and secret not in listing
    for path in ("/staff/keys/issue/", "/me/", "/staff/audit/"):
        assert secret not in staff_client.get(path).content.decode()


def test_a_key_without_expiry_never_expires(staff_client, cast):
    secret, _ = issue(staff_client)
    assert ApiKey.objects.get(secret_hash=hash_secret(secret)).expires_at is None


def test_sending_the_issue_form_again_issues_nothing_new(staff_client, cast):
    # A reload of the secret page, or a double click, sends the very same form again.
    fields = key_form(owner="carol", tier="batch", label="nightly eval")
    first = staff_client.post("/staff/keys/issue/", fields)
    secret = SECRET.search(first.content.decode()).group(1)

    again = staff_client.post("/staff/keys/issue/", fields, follow=True)

    html = again.content.decode()
    assert again.redirect_chain == [("/staff/keys/", 302)]
    assert f"already sent and made key {secret[:11]}…" in html and secret not in html
    assert ApiKey.objects.filter(label="nightly eval").count() == 1
    assert AuditEntry.objects.filter(action="key.issue").count() == 1
    # A fresh form is a new request.
    issue(staff_client, label="nightly eval")
    assert ApiKey.objects.filter(label="nightly eval").count() == 2


def test_sending_a_rotation_with_grace_again_rotates_once(staff_client, cast):
    old = ApiKey.objects.get(pk=cast["alice"].key_id)
    fields = key_form(grace_seconds=3600)
    staff_client.post(f"/staff/keys/{old.prefix}/rotate/", fields)

    again = staff_client.post(f"/staff/keys/{old.prefix}/rotate/", fields, follow=True)

    assert "already sent and made key" in again.content.decode()
    assert ApiKey.objects.filter(owner=old.owner).count() == 2


def test_each_form_carries_its_own_token_and_one_without_is_refused(staff_client, cast):
    token = re.compile(r'name="once" value="([^"]+)"')
    tokens = {token.search(staff_client.get("/staff/keys/issue/").content.decode()).group(1) for _ in range(2)}
    assert len(tokens) == 2

    response = staff_client.post("/staff/keys/issue/", {"owner": "carol", "tier": "batch"})

    assert response.status_code == 200
    assert "This form is out of date: reload the page" in response.content.decode()
    assert ApiKey.objects.count() == 3  # the cast's, nothing new


def test_bad_input_is_shown_on_the_form(staff_client, cast):
    response = staff_client.post("/staff/keys/issue/", key_form(owner="nobody", tier="batch", expires_days=0))
    assert response.status_code == 200
    form = response.context["form"]
    assert set(form.errors) == {"owner", "expires_days"}
    assert ApiKey.objects.count() == 3  # the cast's, nothing new


def test_the_form_can_start_with_an_owner(staff_client, cast):
    html = staff_client.get("/staff/keys/issue/?owner=carol").content.decode()
    assert '<option value="carol" selected>' in html


def test_revoking_asks_first_and_then_revokes(staff_client, cast):
    key = ApiKey.objects.get(pk=cast["bob"].key_id)
    confirm = staff_client.get(f"/staff/keys/{key.prefix}/revoke/")
    assert b"cannot be undone" in confirm.content
    key.refresh_from_db()
    assert key.revoked_at is None  # looking at the question changes nothing

    response = staff_client.post(f"/staff/keys/{key.prefix}/revoke/", follow=True)
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert f"Revoked {key.prefix}" in response.content.decode()
    assert key.prefix not in staff_client.get("/staff/keys/").content.decode()  # live keys only
    assert key.prefix in staff_client.get("/staff/keys/?state=all").content.decode()
    assert key.prefix in staff_client.get("/staff/keys/?show=all").content.decode()  # an older link

    again = staff_client.post(f"/staff/keys/{key.prefix}/revoke/", follow=True)
    assert "was already revoked" in again.content.decode()
    assert AuditEntry.objects.filter(action="key.revoke").count() == 1


def test_rotation_shows_the_new_secret_once_and_keeps_the_old_for_the_grace(staff_client, cast):
    old = ApiKey.objects.get(pk=cast["alice"].key_id)
    response = staff_client.post(f"/staff/keys/{old.prefix}/rotate/", key_form(grace_seconds=3600))
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    secret = SECRET.search(response.content.decode()).group(1)
    new = ApiKey.objects.get(secret_hash=hash_secret(secret))
    old.refresh_from_db()
    assert old.revoked_at is None and 3500 < (old.expires_at - timezone.now()).total_seconds() <= 3600
    assert (new.owner, new.tier, new.label) == (old.owner, old.tier, old.label)
    assert "keeps working until" in response.content.decode()


def test_rotation_without_grace_revokes_the_old_key_and_a_revoked_key_cannot_rotate(staff_client, cast):
    old = ApiKey.objects.get(pk=cast["alice"].key_id)
    response = staff_client.post(f"/staff/keys/{old.prefix}/rotate/", key_form(grace_seconds=0))
    old.refresh_from_db()
    assert old.revoked_at is not None and "is revoked" in response.content.decode()
    again = staff_client.post(f"/staff/keys/{old.prefix}/rotate/", key_form(grace_seconds=0), follow=True)
    assert "issue a new key instead" in again.content.decode()
    assert ApiKey.objects.filter(owner=old.owner).count() == 2


def test_the_list_shows_live_load_and_the_last_days_tokens(staff_client, cast, redis_client):
    from fairness.models import UsageHourly
    from fairness.store.keyspace import ADMISSION_IN_FLIGHT_BY_KEY, ADMISSION_QUEUED_BY_KEY
    from fairness.store.keyspace import ADMISSION_NAMESPACE as ADMISSION_NS

    key = ApiKey.objects.get(pk=cast["carol"].key_id)
    redis_client.hset(ADMISSION_NS + ADMISSION_IN_FLIGHT_BY_KEY, f"p{key.owner_id}.{key.tier.name}", 2)
    redis_client.hset(ADMISSION_NS + ADMISSION_QUEUED_BY_KEY, f"p{key.owner_id}.{key.tier.name}", 5)
    UsageHourly.objects.create(key=key, hour=timezone.now().replace(minute=0, second=0, microsecond=0),
                               requests=3, prompt_tokens=1200, completion_tokens=34)
    rows = staff_client.get("/staff/keys/").context["rows"]
    row = next(r.key for r in rows if r.key.prefix == key.prefix)
    assert (row.in_flight, row.queued, row.tokens_24h) == (2, 5, 1234)
    assert "1,234" in staff_client.get("/staff/keys/").content.decode()


def test_a_key_charges_the_account_chosen_for_it_and_only_one_of_its_owners(staff_client, cast):
    carol = get_user_model().objects.get(username="carol")
    nlp = Account.objects.create(name="nlp")
    Account.objects.create(name="vision")
    Membership.objects.create(account=nlp, user=carol)
    secret, _ = issue(staff_client, account="nlp")
    assert ApiKey.objects.get(secret_hash=hash_secret(secret)).membership.account.name == "nlp"

    refused = staff_client.post("/staff/keys/issue/", key_form(owner="carol", tier="batch", account="vision"))
    assert refused.status_code == 200 and "carol is not a member of vision" in refused.content.decode()
    assert ApiKey.objects.filter(owner=carol).count() == 2  # the cast's key and the nlp one


def test_the_issue_form_offers_only_the_named_owners_accounts_and_tells_the_script_everyones(staff_client, cast):
    carol, bob = (get_user_model().objects.get(username=name) for name in ("carol", "bob"))
    nlp, vision = Account.objects.create(name="nlp"), Account.objects.create(name="vision")
    Membership.objects.create(account=nlp, user=carol)
    Membership.objects.create(account=vision, user=bob)
    form = staff_client.get("/staff/keys/issue/?owner=carol").context["form"]
    assert [account.name for account in form.fields["account"].queryset] == ["carol", "nlp"]  # her own, and nlp
    assert {"carol": ["carol", "nlp"], "bob": ["bob", "vision"]}.items() <= form.accounts_of_owners().items()
    unnamed = staff_client.get("/staff/keys/issue/").context["form"]  # no owner yet: every account
    assert {"nlp", "vision"} <= {account.name for account in unnamed.fields["account"].queryset}
