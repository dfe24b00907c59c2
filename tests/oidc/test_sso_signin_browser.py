"""Sign-in with the institution's account in headless Chromium, the whole redirect round trip
against a real provider: authorization code with PKCE, state and nonce, the ID token's signature
checked against the provider's JWKS. And what is refused: a replayed callback, an expired ID
token, someone in no mapped group (whose keys then stop at the gateway)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.contrib.auth import get_user_model

from fairness.actions import accounts
from fairness.actions.keys import issue
from fairness.models import AuditEntry, Membership
from fairness.portal.signin import sso_identities
from tests.support.audit import SETUP
from tests.support.oidc import Labs, Provider
from tests.support.polling import wait_for

User = get_user_model()


def sso_sign_in(page, base_url: str, username: str) -> None:
    """From the portal's sign-in page through the provider's form and back."""
    page.goto(base_url + "/accounts/login/")
    page.get_by_role("link", name="Sign in with your institution's account").click()
    page.wait_for_selector("input[name=login]")
    page.fill("input[name=login]", username)
    page.fill("input[name=password]", "anything")
    page.locator("button[type=submit]").click()
    # Back at the portal: its page after the callback, or the callback's own refusal.
    page.wait_for_url(lambda url: url.startswith(base_url) and "/oidc/authenticate/" not in url)


def new_page(browser):
    page = browser.new_context().new_page()
    # The provider's development form links a web font: offline, fail it at once.
    page.route("https://fonts.googleapis.com/**", lambda route: route.abort())
    return page


@pytest.mark.browser
def test_a_researcher_signs_in_with_pkce_and_joins_their_groups_account(chromium, sso_portal, oidc_provider: Provider,
                                                                        labs: Labs):
    oidc_provider.set({"alice": ["nlp-lab", "some-unmapped-group"]})
    authorize: list[str] = []
    callbacks: list[str] = []
    with chromium() as browser:
        page = new_page(browser)
        page.on("request", lambda r: authorize.append(r.url) if r.url.startswith(oidc_provider.issuer + "/auth?")
                else callbacks.append(r.url) if "/oidc/callback/" in r.url else None)
        sso_sign_in(page, sso_portal.url, "alice")
        assert page.url == sso_portal.url + "/me/"
        assert "alice" in page.locator("body").inner_text()

        # Replaying the callback (same code, same state) in the same browser is refused...
        replay = page.goto(callbacks[0])
        assert replay is not None and replay.status == 400
        assert "already used" in page.locator("main").inner_text()
        # ...and in another browser that never started this sign-in.
        other = new_page(browser)
        replay = other.goto(callbacks[0])
        assert replay is not None and replay.status == 400

    query = parse_qs(urlsplit(authorize[0]).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
    assert query["state"][0] and query["nonce"][0]
    alice = User.objects.get(username="alice")
    assert alice.email == "alice@uni.example" and not alice.has_usable_password()
    membership = Membership.objects.get(user=alice)
    assert membership.account == labs.nlp and membership.is_default
    assert list(AuditEntry.objects.filter(actor_name="oidc").order_by("pk").values_list("action", "target")) == [
        ("user.create", "alice"), ("account.add_member", "nlp")]


@pytest.mark.browser
def test_someone_in_no_mapped_group_is_refused_and_their_keys_stop_until_they_are_back(
        chromium, sso_portal, oidc_provider: Provider, labs: Labs):
    bob = User.objects.create_user("bob", "bob@uni.example")
    sso_identities.link(SETUP, bob, oidc_provider.issuer, "bob")  # made before SSO: linked on purpose
    accounts.add_member(SETUP, labs.nlp, bob)
    _, secret = issue(SETUP, bob, labs.standard)
    oidc_provider.set({"bob": ["some-unmapped-group"]})

    def gateway_says() -> str:
        response = httpx.post(sso_portal.url + "/v1/chat/completions", timeout=5,
                              headers={"Authorization": f"Bearer {secret}"},
                              json={"model": "sim", "messages": [{"role": "user", "content": "hi"}]})
        return response.json()["error"]["code"] if response.status_code == 401 else f"status {response.status_code}"

    with chromium() as browser:
        assert gateway_says() != "owner_inactive"
        page = new_page(browser)
        sso_sign_in(page, sso_portal.url, "bob")
        assert "none of the groups" in page.locator("main").inner_text()
        assert page.goto(sso_portal.url + "/me/").url.startswith(sso_portal.url + "/accounts/login/")
        wait_for(lambda: gateway_says() == "owner_inactive", timeout=5, what="the gateway to refuse bob's key")

        oidc_provider.set({"bob": ["nlp-lab"]})  # back in the lab
        page = new_page(browser)
        sso_sign_in(page, sso_portal.url, "bob")
        assert page.url == sso_portal.url + "/me/"
        wait_for(lambda: gateway_says() != "owner_inactive", timeout=5, what="the gateway to take bob's key again")

    actions_seen = list(AuditEntry.objects.filter(target="bob").values_list("action", "actor_name"))
    assert ("user.deactivate", "oidc") in actions_seen and ("user.reactivate", "oidc") in actions_seen
    assert User.objects.get(username="bob").is_active


@pytest.mark.browser
def test_an_expired_id_token_is_refused(chromium, sso_portal, oidc_provider: Provider, labs: Labs):
    # The provider's clock five minutes behind: its ID tokens (60 s) expired before they were sent.
    oidc_provider.set({"alice": ["nlp-lab"]}, clock_offset_seconds=-300)
    with chromium() as browser:
        page = new_page(browser)
        sso_sign_in(page, sso_portal.url, "alice")
        assert "had expired" in page.locator("main").inner_text()
        assert page.goto(sso_portal.url + "/me/").url.startswith(sso_portal.url + "/accounts/login/")
    assert not User.objects.filter(username="alice").exists()
