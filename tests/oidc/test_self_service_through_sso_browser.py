"""A researcher's own keys as they live them, in headless Chromium against the real provider: a
first sign-in through the full redirect round trip puts them in their lab's account; on /me/keys/
they make a key, call a live gateway with it through the openai SDK, rotate it and revoke it; when
the institution drops them from every mapped group, their next sign-in stops their remaining key
(401 `owner_inactive`) and ends the portal session they left open elsewhere. And another
researcher's key is a 404 to them, by its prefix, however they ask."""

from __future__ import annotations

import openai
import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from fairness.actions.audit import Actor
from fairness.actions.users import set_user_active
from fairness.models import Account, ApiKey, AuditEntry, Membership
from fairness.portal.signin import group_sync
from fairness.portal.submit_once import new_token
from tests.oidc.test_sso_signin_browser import new_page, sso_sign_in
from tests.support.audit import SETUP
from tests.support.browser import ask
from tests.support.cast import STAFF_IP
from tests.support.oidc import Provider, sso_settings
from tests.support.polling import wait_for

User = get_user_model()
PREFIX_CHARS = 11  # "gp-" and eight more: what the pages and the audit log name a key by


@pytest.fixture
def nlp_lab(staff, tiers) -> Account:
    """Staff map the institution's group nlp-lab to the account nlp, tier interactive."""
    account = Account.objects.create(name="nlp")
    group_sync.add_mapping(Actor(staff, STAFF_IP), "nlp-lab", account, tiers["interactive"])
    return account


def gateway_says(secret: str, gateway_url: str) -> str:
    """'answered' (a completion through the openai SDK), or the code of the gateway's 401."""
    try:
        completion = ask(secret, gateway_url)
    except openai.AuthenticationError as refused:
        return refused.code or "401 without a code"
    return "answered" if completion else "an empty completion"


def make_key(page, base_url: str, label: str, days: int = 30) -> str:
    """On /me/keys/, the new-key form; the secret its one page shows."""
    from playwright.sync_api import expect

    page.goto(base_url + "/me/keys/")
    page.fill("#id_label", label)
    page.fill("#id_expires_days", str(days))
    page.get_by_role("button", name="Make key").click()
    expect(page.get_by_role("heading", name="Key issued")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("cannot be shown again")
    return page.locator("#secret").inner_text().strip()


def row_of(page, prefix: str):
    return page.locator("tbody tr", has=page.locator("code", has_text=prefix))


@pytest.mark.browser
def test_a_new_researcher_serves_themselves_until_the_institution_drops_them(
        chromium, sso_portal, oidc_provider: Provider, gateway, replica, nlp_lab):
    from playwright.sync_api import expect

    oidc_provider.set({"rosa": ["nlp-lab", "canteen-committee"]})
    assert not User.objects.filter(username="rosa").exists()
    with chromium() as browser:
        laptop = new_page(browser)
        sso_sign_in(laptop, sso_portal.url, "rosa")
        assert laptop.url == sso_portal.url + "/me/"
        laptop.goto(sso_portal.url + "/me/keys/")  # her lab's account and tier, from the mapping
        expect(laptop.locator("#new-key-heading + p")).to_contain_text("In tier interactive")
        expect(laptop.locator("#id_account option:checked")).to_have_text("nlp (default)")

        # A named key, its secret shown once: a reload sends the form again and makes nothing new.
        first = make_key(laptop, sso_portal.url, "notebook")
        assert first.startswith("gp-") and first not in laptop.url
        laptop.reload()
        assert laptop.url == sso_portal.url + "/me/keys/"
        expect(laptop.locator(".messages")).to_contain_text("nothing new was issued")
        expect(laptop.locator("body")).not_to_contain_text(first)
        expect(row_of(laptop, first[:PREFIX_CHARS])).to_contain_text("notebook")
        expect(laptop.locator("tbody tr")).to_have_count(1)
        assert gateway_says(first, gateway.url) == "answered"

        # Rotated at once: the old secret stops, the new one answers.
        row_of(laptop, first[:PREFIX_CHARS]).get_by_role("link", name="Rotate").click()
        laptop.get_by_role("button", name="Rotate key").click()
        expect(laptop.get_by_role("heading", name="Key rotated")).to_be_visible()
        expect(laptop.locator("main")).to_contain_text(f"The old key {first[:PREFIX_CHARS]}… is revoked.")
        second = laptop.locator("#secret").inner_text().strip()
        assert second.startswith("gp-") and second != first
        wait_for(lambda: gateway_says(first, gateway.url) == "revoked_api_key", timeout=5,
                 what="the gateway to refuse the rotated secret")
        assert gateway_says(second, gateway.url) == "answered"

        # Revoked: refused too.
        laptop.get_by_role("link", name="Back to my keys").click()
        row_of(laptop, second[:PREFIX_CHARS]).get_by_role("link", name="Revoke").click()
        laptop.get_by_role("button", name="Revoke key").click()
        expect(laptop.locator(".messages")).to_contain_text(f"Revoked {second[:PREFIX_CHARS]}")
        wait_for(lambda: gateway_says(second, gateway.url) == "revoked_api_key", timeout=5,
                 what="the gateway to refuse the revoked key")

        remaining = make_key(laptop, sso_portal.url, "nightly eval")
        assert gateway_says(remaining, gateway.url) == "answered"
        laptop.goto(sso_portal.url + "/me/keys/")  # left open, the new-key form on it

        # The institution drops her from nlp-lab; she signs in on another machine.
        oidc_provider.set({"rosa": ["canteen-committee"]})
        lab_machine = new_page(browser)
        sso_sign_in(lab_machine, sso_portal.url, "rosa")
        expect(lab_machine.locator("main")).to_contain_text("none of the groups")
        wait_for(lambda: gateway_says(remaining, gateway.url) == "owner_inactive", timeout=5,
                 what="the gateway to refuse her remaining key as the key of someone with no access")
        assert lab_machine.goto(sso_portal.url + "/me/keys/").url.startswith(sso_portal.url + "/accounts/login/")

        # The laptop's session, signed in before she left, ends too: the open form makes nothing.
        laptop.fill("#id_label", "one more")
        laptop.get_by_role("button", name="Make key").click()
        laptop.wait_for_url(lambda url: "/accounts/login/" in url)
        assert laptop.goto(sso_portal.url + "/me/keys/").url.startswith(sso_portal.url + "/accounts/login/")

    rosa = User.objects.get(username="rosa")
    assert not rosa.is_active and not rosa.has_usable_password()
    assert Membership.objects.get(user=rosa).account == nlp_lab  # kept, for a return to the lab
    keys = {key.prefix: key for key in ApiKey.objects.filter(owner=rosa).select_related("tier", "membership")}
    made = [first[:PREFIX_CHARS], second[:PREFIX_CHARS], remaining[:PREFIX_CHARS]]
    assert sorted(keys) == sorted(made)
    assert [keys[p].revoked_at is not None for p in made] == [True, True, False]
    assert [keys[p].label for p in made] == ["notebook", "notebook", "nightly eval"]
    assert {(k.tier.name, k.membership.account_id, k.created_by_id) for k in keys.values()} == {
        ("interactive", nlp_lab.pk, rosa.pk)}

    trail = AuditEntry.objects.exclude(action="group_mapping.add").order_by("pk")
    assert list(trail.values_list("actor_name", "action", "target")) == [
        ("oidc", "user.create", "rosa"), ("oidc", "account.add_member", "nlp"),
        ("rosa", "key.issue", made[0]), ("rosa", "key.rotate", made[0]), ("rosa", "key.revoke", made[1]),
        ("rosa", "key.issue", made[2]), ("oidc", "user.deactivate", "rosa"),
    ]
    own = trail.filter(actor_name="rosa")
    assert {(entry.actor_id, entry.ip) for entry in own} == {(rosa.pk, "127.0.0.1")}
    assert own.get(action="key.rotate").detail["new"] == made[1]
    assert own.filter(action="key.issue").first().detail["label"] == "notebook"


@pytest.mark.browser
def test_another_researchers_key_is_not_found_by_its_prefix(chromium, sso_portal, oidc_provider: Provider, nlp_lab):
    oidc_provider.set({"rosa": ["nlp-lab"], "omar": ["nlp-lab"]})
    with chromium() as browser:
        omar = new_page(browser)
        sso_sign_in(omar, sso_portal.url, "omar")
        omars = make_key(omar, sso_portal.url, "omar's cluster job")[:PREFIX_CHARS]

        rosa = new_page(browser)
        sso_sign_in(rosa, sso_portal.url, "rosa")
        own = make_key(rosa, sso_portal.url, "rosa's laptop")[:PREFIX_CHARS]
        rosa.goto(sso_portal.url + "/me/keys/")
        assert omars not in rosa.content()
        csrf = rosa.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")

        def post(path: str) -> int:
            form = {"csrfmiddlewaretoken": csrf, "grace_seconds": "0", "once": new_token()}
            return rosa.request.post(sso_portal.url + path, form=form, max_redirects=0).status

        for action in ("rotate", "revoke"):
            path = f"/me/keys/{omars}/{action}/"
            response = rosa.goto(sso_portal.url + path)
            assert response is not None and response.status == 404 and omars not in rosa.content()
            assert post(path) == 404
            # Exactly what a prefix that does not exist gets.
            assert post(f"/me/keys/gp-Nothing1/{action}/") == 404
        assert post(f"/me/keys/{own}/revoke/") == 302  # the same request, on her own key, is taken

    key = ApiKey.objects.get(prefix=omars)
    assert key.revoked_at is None and ApiKey.objects.filter(owner__username="omar").count() == 1
    assert ApiKey.objects.get(prefix=own).revoked_at is not None
    assert not AuditEntry.objects.filter(target=omars).exclude(action="key.issue").exists()
    assert list(AuditEntry.objects.filter(actor_name="rosa").values_list("action", "target").order_by("pk")) == [
        ("key.issue", own), ("key.revoke", own)]


def test_a_deactivated_researchers_sso_session_ends_at_its_next_request(tiers, redis_url: str):
    rosa = User.objects.create_user("rosa")
    with override_settings(**sso_settings("http://127.0.0.1:9")):  # never asked: the session is the portal's
        client = Client()
        client.force_login(rosa, backend="fairness.portal.signin.oidc_backend.SsoBackend")
        assert client.get("/me/keys/").status_code == 200
        set_user_active(SETUP, rosa, False)
        response = client.get("/me/keys/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
