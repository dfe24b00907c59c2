"""The fair-share pages in headless Chromium against a live gateway, at desktop and phone width
(nothing scrolls sideways, axe-core finds no violation): the staff tree with its bars and
factors, an account added through its form, and a heavy user's sentence on /me/."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.support.accounts import charge
from tests.support.browser import sign_in
from tests.support.browser_checks import check_page
from tests.support.cast import ALICE_PASSWORD, STAFF_PASSWORD

User = get_user_model()

# Each bar's filled part as a fraction of the bar, for the table row of `name`.
BAR_FILLS = """(name) => {
  const row = [...document.querySelectorAll('table.accounts tbody tr')]
    .find(tr => tr.querySelector('th').firstChild.textContent.trim() === name);
  return [...row.querySelectorAll('.bar')].map(bar =>
    bar.querySelector('.fill').getBoundingClientRect().width / bar.clientWidth);
}"""


@pytest.mark.browser
def test_the_staff_tree_shows_bars_and_factors(chromium, gateway, tree, staff):
    charge((tree.alice, 1000.0))
    staff.set_password(STAFF_PASSWORD)
    staff.save()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in(page, gateway.url, "/staff/accounts/", "sam", STAFF_PASSWORD)
        for path in ("/staff/accounts/", "/staff/accounts/new/", "/staff/accounts/lab/shares/",
                     "/staff/accounts/members/new/?user=alice&account=nlp&shares=1"):
            check_page(page, gateway.url + path)

        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(gateway.url + "/staff/accounts/")
        nlp = page.locator("table.accounts tbody tr", has_text="under lab")
        assert nlp.locator(".bar-figure").all_inner_texts() == ["40.0%", "100.0%"]  # S, then U
        assert "0.18" in nlp.locator("td.factor").inner_text()  # F = 2^(-1/0.4)
        assert "2.5× its share" in nlp.locator("td.factor").inner_text()
        share, usage = page.evaluate(BAR_FILLS, "nlp")
        assert share == pytest.approx(0.4, abs=0.02) and usage == pytest.approx(1.0, abs=0.02)
        share, usage = page.evaluate(BAR_FILLS, "bob")  # a top account, 1 of 5 shares, nothing used
        assert share == pytest.approx(0.2, abs=0.02) and usage == 0

        page.fill("#account-name", "vision")
        page.select_option("#account-parent", "lab")
        page.fill("#account-shares", "3")
        page.get_by_role("button", name="Add account").click()
        page.wait_for_url(gateway.url + "/staff/accounts/")
        assert "Added account vision under lab" in page.locator(".messages").inner_text()
        assert page.locator("table.accounts tbody tr", has_text="under lab").count() == 2
        assert errors == []


@pytest.mark.browser
def test_a_heavy_user_reads_where_they_stand_on_their_page(chromium, gateway, tree):
    charge((tree.alice, 1000.0))
    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        sign_in(page, gateway.url, "/me/", "alice", ALICE_PASSWORD)
        check_page(page, gateway.url + "/me/")
        standing = page.get_by_role("region", name="Where you stand").inner_text()
        assert "In nlp you used 2.5× your share lately; your requests wait behind lighter users'" in standing
        assert "counts half as much by" in standing
        assert "bob" not in standing and "carol" not in standing
