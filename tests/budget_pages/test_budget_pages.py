"""The staff budgets page, the staff home's budgets near their limit, and a researcher's own
budgets and 80% banner on /me/, through the test client."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils import timezone

from fairness.actions import budgets
from fairness.actions.keys import revoke
from fairness.models import ApiKey, AuditEntry, Budget
from tests.support.audit import SETUP
from tests.support.budgets import use
from tests.support.cast import STAFF_IP

pytestmark = pytest.mark.django_db(transaction=True)


def item_of(html: str, budget: Budget) -> str:
    found = re.search(rf'<li class="budget[^"]*" id="budget-{budget.pk}">.*?</li>', html, re.S)
    assert found, f"no item for budget {budget.pk}"
    return found.group(0)


def test_the_page_draws_used_and_held_against_the_limit_beside_the_period_gone_by(staff_client, tree):
    budget = budgets.set_budget(SETUP, account=tree.nlp, tokens=1000, period="month")
    use(budget, 600, 100)
    html = staff_client.get("/staff/budgets/").content.decode()
    item = item_of(html, budget)
    assert "nlp" in item and "1,000 tokens per month" in item
    assert 'class="fill used" style="width: 60.0%"' in item and 'class="fill held" style="width: 10.0%"' in item
    assert 'class="fill elapsed"' in item and "resets 1 " in item.lower()
    assert "600 used, 100 held by running requests; 300 left of 1,000 tokens for " in item


def test_a_pace_that_empties_the_budget_before_the_reset_is_called_out(staff_client, tree):
    budget = budgets.set_budget(SETUP, account=tree.lab, tokens=1000, period="month")
    use(budget, 999)
    item = item_of(staff_client.get("/staff/budgets/").content.decode(), budget)
    # Nearly all used however far into the month we are: on course to run out within hours.
    assert "on course to run out around" in item or "used up" in item
    use(budget, 1000)
    assert "used up" in item_of(staff_client.get("/staff/budgets/").content.decode(), budget)


def test_a_raise_shows_its_date_and_the_standing_budget_it_replaces(staff_client, tree):
    standing = budgets.set_budget(SETUP, membership=tree.alice, tokens=100, period="day")
    raised = budgets.set_budget(SETUP, membership=tree.alice, tokens=900, period="day",
                                until=timezone.now() + dt.timedelta(days=5))
    html = staff_client.get("/staff/budgets/").content.decode()
    assert "raise until " in item_of(html, raised) and "alice in nlp" in item_of(html, raised)
    assert "replaced by a raise for now" in item_of(html, standing)


def test_staff_set_a_budget_through_the_form_audited(staff_client, tree):
    day = (timezone.localdate() + dt.timedelta(days=10)).isoformat()
    response = staff_client.post("/staff/budgets/set/", {
        "holder": "user:lab:bob", "tokens": "5000", "period": "month",
        "until": day,
    })
    assert response.status_code == 302 and response["Location"] == "/staff/budgets/"
    budget = Budget.objects.get()
    assert budget.membership == tree.bob and budget.until is not None
    entry = AuditEntry.objects.get(action="budget.set")
    assert entry.actor_name == "sam" and entry.ip == STAFF_IP and entry.target == "bob in lab"
    assert "Budget of bob in lab: 5,000 tokens per month, raised until" in staff_client.get(
        "/staff/budgets/").content.decode()


@pytest.mark.parametrize(("form", "words"), [
    ({"holder": "account:nowhere", "tokens": "5", "period": "day"}, "Select a valid choice"),
    ({"holder": "user:lab:alice", "tokens": "5", "period": "day"}, "Select a valid choice"),  # she is in nlp
    ({"holder": "lab", "tokens": "5", "period": "day"}, "Select a valid choice"),  # a name typed, not chosen
    ({"tokens": "5", "period": "day"}, "This field is required"),
    ({"holder": "account:lab", "tokens": "5", "period": "rolling"}, "needs the window"),
    ({"holder": "account:lab", "tokens": "0", "period": "day"}, "greater than or equal to 1"),
    ({"holder": "account:lab", "tokens": "5", "period": "day", "until": "2001-01-01"},
     "A raise ends in the future"),
])
def test_mistakes_show_on_the_form_and_change_nothing(staff_client, tree, form, words):
    response = staff_client.post("/staff/budgets/set/", form)
    assert response.status_code == 200 and words in response.content.decode()
    assert not Budget.objects.exists()


def test_the_holder_is_chosen_from_the_accounts_users_and_live_keys(staff_client, tree, cast):
    carol_key = ApiKey.objects.get(pk=cast["carol"].key_id)
    revoke(SETUP, carol_key)
    get_user_model().objects.filter(username="bob").update(is_active=False)
    alice_key = ApiKey.objects.get(pk=cast["alice"].key_id)
    html = staff_client.get("/staff/budgets/").content.decode()
    select = re.search(r'<select name="holder"[^>]*id="budget-holder"[^>]*>(.*?)</select>', html, re.S).group(1)
    groups = re.findall(r'<optgroup label="([^"]+)">', select)
    assert groups == ["Accounts (each counts its whole subtree)", "Users in an account", "Keys"]
    values = re.findall(r'<option value="([^"]*)"', select)
    assert values[0] == ""
    assert {"account:lab", "account:nlp", "user:nlp:alice", f"key:{alice_key.prefix}"} <= set(values)
    assert '<option value="user:nlp:alice">alice in nlp (their default)</option>' in select
    assert "user:lab:bob" not in values  # deactivated: his budgets would count nothing
    assert f"key:{carol_key.prefix}" not in values  # revoked
    # A holder that stopped being one after the page was drawn is refused on the form too.
    response = staff_client.post("/staff/budgets/set/", {"holder": f"key:{carol_key.prefix}", "tokens": "5",
                                                         "period": "day"})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not Budget.objects.exists()


def test_a_chosen_holder_is_found_again_by_the_same_rules_as_typed_names(tree, cast):
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    assert budgets.holder_of_choice("account:nlp") == {"account": tree.nlp}
    assert budgets.holder_of_choice("user:nlp:alice") == {"membership": tree.alice}
    assert budgets.holder_of_choice(f"key:{key.prefix}") == {"key": key}
    every = [value for _, group in budgets.holder_choices() for value, _ in group]
    assert all(budgets.holder_of_choice(value) for value in every)
    for wrong, field in (("user:lab:alice", "account"), ("user:nlp:", "holder"), ("account:", "holder"),
                         ("team:lab", "holder"), ("key:gp-nothing", "holder")):
        with pytest.raises(ValidationError) as refused:
            budgets.holder_of_choice(wrong)
        assert field in refused.value.message_dict, wrong


def test_the_form_labels_have_no_colon_and_the_date_is_a_date_input(staff_client, tree):
    html = staff_client.get("/staff/budgets/").content.decode()
    form = html[html.index('id="set-budget-heading"'):]
    labels = re.findall(r'<label for="budget-[^"]+">([^<]*)</label>', form)
    assert labels == ["Holder", "Tokens", "Period", "Window (hours)", "Raise until"]
    assert re.search(r'<input type="date" name="until"[^>]*id="budget-until"', form)


def test_staff_remove_a_budget_audited(staff_client, tree):
    budget = budgets.set_budget(SETUP, account=tree.lab, tokens=10, period="week")
    response = staff_client.post(f"/staff/budgets/{budget.pk}/remove/")
    assert response.status_code == 302 and not Budget.objects.exists()
    assert AuditEntry.objects.get(action="budget.remove").actor_name == "sam"


def test_a_researcher_may_not_see_or_change_budgets(researcher_client, tree):
    budget = budgets.set_budget(SETUP, account=tree.lab, tokens=10, period="week")
    assert researcher_client.get("/staff/budgets/").status_code == 403
    assert researcher_client.post("/staff/budgets/set/", {"holder": "user:nlp:alice",
                                                          "tokens": "99999", "period": "day"}).status_code == 403
    assert researcher_client.post(f"/staff/budgets/{budget.pk}/remove/").status_code == 403
    assert list(Budget.objects.values_list("tokens", flat=True)) == [10]


def test_the_staff_home_lists_budgets_over_80_percent(staff_client, tree):
    near = budgets.set_budget(SETUP, account=tree.nlp, tokens=1000, period="month")
    calm = budgets.set_budget(SETUP, account=tree.lab, tokens=1000, period="month")
    use(near, 850)
    use(calm, 100)
    html = staff_client.get("/staff/").content.decode()
    section = html[html.index('id="home-budgets"'):]
    assert f"#budget-{near.pk}" in section and "85% of 1,000 tokens" in section
    assert f"#budget-{calm.pk}" not in section
    assert "Nothing needs attention" not in html
    assert 'id="home-alerts"' in html  # the rest is still there


def test_a_researcher_sees_their_budgets_and_a_banner_at_80_percent(researcher_client, tree, cast):
    account = budgets.set_budget(SETUP, account=tree.nlp, tokens=5_000_000, period="month")
    mine = budgets.set_budget(SETUP, membership=tree.alice, tokens=2_000_000, period="month")
    key = budgets.set_budget(SETUP, key=tree.alice.api_keys.get(), tokens=900, period="day")
    above = budgets.set_budget(SETUP, account=tree.lab, tokens=9_000_000, period="month")
    bobs = budgets.set_budget(SETUP, membership=tree.bob, tokens=777_777, period="month")
    carols = budgets.set_budget(SETUP, account=cast_account(cast), tokens=123_456, period="month")
    use(account, 4_150_000)
    use(mine, 100_000)
    use(bobs, 700_000)
    html = researcher_client.get("/me/").content.decode()
    banner = re.search(r'<div class="budget-notice" role="status">(.*?)</div>', html, re.S).group(1)
    month = timezone.localdate().strftime("%B")
    assert f"nlp has used 83% of its 5.0 M tokens for {month}; resets 1 " in banner
    assert "alice in nlp" not in banner  # 5% of hers: no banner
    budgets_card = html[html.index('id="budgets-heading"'):html.index('id="keys-heading"')]
    for shown in ("nlp", "alice in nlp", "900 tokens per day", "lab"):
        assert shown in budgets_card
    assert "bob" not in budgets_card and "777" not in budgets_card and "123" not in budgets_card
    assert key and above and carols
    assert 'id="standing-heading"' in html  # where you stand is still there


def cast_account(cast):
    from fairness.models import Account

    return Account.objects.get(memberships__user__username="carol")


def test_the_accounts_page_shows_each_account_budget_against_the_period(staff_client, tree):
    budget = budgets.set_budget(SETUP, account=tree.nlp, tokens=5_000_000, period="month")
    html = staff_client.get("/staff/accounts/").content.decode()
    assert f'id="account-budget-{budget.pk}"' in html and "5.0 M" in html and "period" in html
