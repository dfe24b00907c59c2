"""The budgets pages in headless Chromium against a live gateway, at desktop and phone width
(nothing scrolls sideways, axe-core finds no violation): the staff page's bars and its form, and
the 80% banner on a researcher's /me/."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.actions import budgets
from tests.support.audit import SETUP
from tests.support.browser import sign_in
from tests.support.browser_checks import check_current_page, check_page
from tests.support.budgets import use
from tests.support.cast import ALICE_PASSWORD, STAFF_PASSWORD

User = get_user_model()

# The used bar's filled part (settled + held) as a fraction of the bar, for the item of a budget.
USED_FILL = """(id) => {
  const bar = document.querySelector('#budget-' + id + ' .bar');
  return [...bar.querySelectorAll('.fill')].reduce((sum, f) => sum + f.getBoundingClientRect().width, 0)
    / bar.clientWidth;
}"""

# How an input is drawn: its box and border, which the stylesheet sets for the form's inputs.
INPUT_LOOK = """(selector) => {
  const style = getComputedStyle(document.querySelector(selector));
  return [style.width, style.borderTopWidth, style.borderTopColor, style.borderRadius, style.paddingLeft,
          style.fontSize];
}"""


@pytest.mark.browser
def test_the_staff_budgets_page_draws_bars_and_sets_a_budget(chromium, gateway, tree, staff):
    budget = budgets.set_budget(SETUP, account=tree.nlp, tokens=1000, period="month")
    use(budget, 500, 250)
    staff.set_password(STAFF_PASSWORD)
    staff.save()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in(page, gateway.url, "/staff/budgets/", "sam", STAFF_PASSWORD)
        check_page(page, gateway.url + "/staff/budgets/")
        check_page(page, gateway.url + "/staff/")

        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(gateway.url + "/staff/budgets/")
        assert page.evaluate(USED_FILL, budget.pk) == pytest.approx(0.75, abs=0.02)
        # The date input is drawn as the form's other inputs are, not as the browser's bare default.
        assert page.evaluate(INPUT_LOOK, "#budget-until") == page.evaluate(INPUT_LOOK, "#budget-tokens")
        page.select_option("#budget-holder", label="bob in lab (their default)")
        page.fill("#budget-tokens", "4000")
        page.select_option("#budget-period", "week")
        page.get_by_role("button", name="Set budget").click()
        page.wait_for_url(gateway.url + "/staff/budgets/")
        assert "Budget of bob in lab: 4,000 tokens per week." in page.locator(".messages").inner_text()
        assert page.locator("li.budget", has_text="bob in lab").count() == 1
        check_current_page(page, "the budgets page saying what was set")

        page.set_viewport_size({"width": 1280, "height": 900})
        page.select_option("#budget-holder", "account:nlp")
        page.fill("#budget-tokens", "10")
        page.select_option("#budget-period", "rolling")
        page.get_by_role("button", name="Set budget").click()
        page.wait_for_url(gateway.url + "/staff/budgets/set/")
        assert "needs the window" in page.locator("#budget-window_hours").locator("xpath=..").inner_text()
        assert page.locator("#budget-holder").input_value() == "account:nlp"  # the choice is kept
        check_current_page(page, "the budget form refusing a rolling budget without its window")
        assert errors == []


@pytest.mark.browser
def test_a_researcher_near_a_budget_reads_the_banner_on_their_page(chromium, gateway, tree):
    budget = budgets.set_budget(SETUP, account=tree.nlp, tokens=5_000_000, period="month")
    use(budget, 4_150_000)
    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    month = timezone.localdate().strftime("%B")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        sign_in(page, gateway.url, "/me/", "alice", ALICE_PASSWORD)
        check_page(page, gateway.url + "/me/")
        banner = page.locator(".budget-notice").inner_text()
        assert f"nlp has used 83% of its 5.0 M tokens for {month}; resets 1 " in banner
        card = page.get_by_role("region", name="Token budgets").inner_text()
        assert "nlp" in card and "850 k left of 5.0 M tokens" in card
