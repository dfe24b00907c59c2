"""The key limit forms in headless Chromium, at desktop and phone width with axe-core: staff hold a
key below its tier on its Limits page (a figure above the tier is refused on its field first), the
keys page says so; a researcher narrows their own key on /me/keys/ the same way."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fairness.models import ApiKey, AuditEntry, KeyLimits
from tests.support.browser import sign_in, sign_in_as_staff
from tests.support.browser_checks import WIDTHS, accessibility_violations, check_page, sideways_overflow
from tests.support.cast import ALICE_PASSWORD, STAFF_PASSWORD

User = get_user_model()


def check_as_it_stands(page, what: str) -> None:
    """check_page for a page that is a POST's answer (a form with its errors)."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        assert sideways_overflow(page) <= 0, f"{what} scrolls sideways at {width} px"
        violations = accessibility_violations(page)
        assert not violations, f"{what} at {width} px: {violations}"
    page.set_viewport_size({"width": 1280, "height": 900})


@pytest.mark.browser
def test_staff_and_a_researcher_hold_keys_below_their_tier_in_the_browser(chromium, gateway, replica, cast):
    from playwright.sync_api import expect

    # Everything the database needs first: while the browser runs, Django refuses queries here.
    User.objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)
    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    bobs = ApiKey.objects.get(pk=cast["bob"].key_id).prefix
    alices = ApiKey.objects.get(pk=cast["alice"].key_id).prefix

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in_as_staff(page, gateway.url)
        check_page(page, gateway.url + "/staff/keys/issue/")
        check_page(page, gateway.url + f"/staff/keys/{bobs}/limits/")
        page.set_viewport_size({"width": 1280, "height": 900})
        page.get_by_label("Requests at once (this key)").fill("3")
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".errorlist")).to_contain_text("At most 2, the interactive tier's")
        check_as_it_stands(page, "the staff limits form with an error")
        page.get_by_label("Requests at once (this key)").fill("1")
        page.get_by_label("Models (this key)").fill("sim")
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".messages")).to_contain_text(f"Saved the limits of {bobs}")
        row = page.locator("tbody tr", has=page.locator("code", has_text=bobs))
        expect(row).to_contain_text("held below it: 1 at once (tier: 2); models: sim")
        check_page(page, gateway.url + "/staff/keys/")

        researcher = browser.new_page(viewport={"width": 1280, "height": 900})
        sign_in(researcher, gateway.url, "/me/keys/", "alice", ALICE_PASSWORD)
        check_page(researcher, gateway.url + "/me/keys/")
        check_page(researcher, gateway.url + f"/me/keys/{alices}/limits/")
        researcher.set_viewport_size({"width": 1280, "height": 900})
        researcher.get_by_label("Requests a minute (this key)").fill("30")
        researcher.get_by_role("button", name="Save").click()
        expect(researcher.locator(".messages")).to_contain_text(f"Saved the limits of {alices}")
        expect(researcher.locator(f"#key-{alices}")).to_contain_text("30 requests a minute (tier: no limit)")
        check_page(researcher, gateway.url + "/me/keys/")
        assert errors == []

    assert KeyLimits.of(ApiKey.objects.get(prefix=bobs)) == KeyLimits(max_concurrent=1, allowed_models=("sim",))
    assert KeyLimits.of(ApiKey.objects.get(prefix=alices)) == KeyLimits(requests_per_minute=30)
    assert set(AuditEntry.objects.filter(action="key.limits").values_list("actor_name", flat=True)) == {"sam", "alice"}
