"""End to end in headless Chromium against a live gateway: a researcher signs in with a password,
makes a key on /me/keys/, calls the endpoint with it through the openai SDK, revokes it on the page,
and the SDK's next call is refused with 401. Both pages fit a desktop and a phone and pass axe."""

from __future__ import annotations

import openai
import pytest
from django.contrib.auth import get_user_model

from fairness.models import ApiKey, AuditEntry
from tests.support.browser import ask, sign_in
from tests.support.browser_checks import WIDTHS, accessibility_violations, check_page, sideways_overflow
from tests.support.cast import ALICE_PASSWORD
from tests.support.polling import wait_for

User = get_user_model()


def check_this_page(page) -> None:
    """check_page for a page that cannot be opened again (the secret is a POST's answer)."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        assert sideways_overflow(page) <= 0, f"the secret page scrolls sideways at {width} px"
        assert not accessibility_violations(page), f"the secret page at {width} px"


def refused(secret: str, gateway_url: str) -> bool:
    try:
        ask(secret, gateway_url)
    except openai.AuthenticationError:
        return True
    return False


@pytest.mark.browser
def test_a_researcher_makes_uses_and_revokes_a_key_in_the_browser(chromium, gateway, replica, cast, screenshot_dir):
    from playwright.sync_api import expect

    # Everything the database needs first: while the browser runs, Django refuses queries here.
    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in(page, gateway.url, "/me/keys/", "alice", ALICE_PASSWORD)
        check_page(page, gateway.url + "/me/keys/")

        page.set_viewport_size({"width": 1280, "height": 900})
        page.fill("#id_label", "notebook")
        page.fill("#id_expires_days", "7")
        page.get_by_role("button", name="Make key").click()
        expect(page.get_by_role("heading", name="Key issued")).to_be_visible()
        expect(page.get_by_role("alert")).to_contain_text("cannot be shown again")
        secret = page.locator("#secret").inner_text().strip()
        assert secret.startswith("gp-") and secret not in page.url
        check_this_page(page)
        page.screenshot(path=screenshot_dir / "me-key-made.png", full_page=True)

        assert ask(secret, gateway.url)  # the new key works through the gateway at once

        page.set_viewport_size({"width": 1280, "height": 900})
        page.get_by_role("link", name="Back to my keys").click()
        expect(page.locator("body")).not_to_contain_text(secret)
        row = page.locator("tbody tr", has=page.locator("code", has_text=secret[:11]))
        expect(row).to_contain_text("notebook")
        row.get_by_role("link", name="Revoke").click()
        page.get_by_role("button", name="Revoke key").click()
        expect(page.locator(".messages")).to_contain_text(f"Revoked {secret[:11]}")

        wait_for(lambda: refused(secret, gateway.url), timeout=2.0, what="the revoked key refused with 401")
        assert errors == []

    key = ApiKey.objects.get(prefix=secret[:11])
    assert key.revoked_at is not None and key.created_by == alice and key.label == "notebook"
    made = AuditEntry.objects.filter(actor=alice, target=key.prefix).values_list("action", flat=True)
    assert set(made) == {"key.issue", "key.revoke"}
