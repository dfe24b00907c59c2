"""A lab manager's pages in headless Chromium: they fit a desktop and a phone, pass axe, and a
member added in the browser shows up."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fairness.actions import accounts, budgets, lab_managers
from tests.support.audit import SETUP
from tests.support.browser import sign_in
from tests.support.browser_checks import check_page
from tests.support.cast import ALICE_PASSWORD

User = get_user_model()


@pytest.mark.browser
def test_a_managers_pages_fit_a_phone_pass_axe_and_add_a_member(chromium, gateway, replica, cast, screenshot_dir):
    from playwright.sync_api import expect

    # Everything the database needs first: while the browser runs, Django refuses queries here.
    alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    lab = accounts.add_account(SETUP, "lab", shares=3)
    lab_managers.set_manager(SETUP, accounts.add_member(SETUP, lab, alice), True)
    accounts.add_member(SETUP, lab, bob, shares=2)
    nlp = accounts.add_account(SETUP, "nlp", parent=lab, shares=2)
    budgets.set_budget(SETUP, account=lab, tokens=1_000_000, period="month")
    budgets.set_budget(SETUP, account=nlp, tokens=200_000, period="month")

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in(page, gateway.url, "/me/", "alice", ALICE_PASSWORD)
        expect(page.get_by_role("heading", name="Accounts you manage")).to_be_visible()
        for path in ("/me/", "/me/lab/", "/me/lab/lab/", "/me/lab/nlp/"):
            check_page(page, gateway.url + path)
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(gateway.url + "/me/lab/lab/")
        page.get_by_label("Username").fill("carol")
        page.get_by_role("button", name="Add member").click()
        expect(page.get_by_role("row", name="carol")).to_be_visible()
        page.screenshot(path=str(screenshot_dir / "lab-manager-phone.png"), full_page=True)
        assert errors == []
