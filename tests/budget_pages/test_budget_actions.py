"""Setting and removing budgets through the audited actions and `manage.py set_budget`: the
audit entries, a standing budget changed in place, a raise until a date, and clear refusals."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.utils import timezone

from fairness.actions import budgets
from fairness.models import ApiKey, AuditEntry, Budget
from fairness.telemetry import budget_status
from tests.support.audit import SETUP
from tests.support.budgets import use

pytestmark = pytest.mark.django_db(transaction=True)


def command(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_setting_a_standing_budget_again_changes_it_in_place_and_keeps_the_periods_usage(tree):
    first = budgets.set_budget(SETUP, account=tree.nlp, tokens=1000, period="month")
    use(first, 600)
    second = budgets.set_budget(SETUP, account=tree.nlp, tokens=2000, period="month")
    assert second.pk == first.pk and Budget.objects.count() == 1
    (status,) = budget_status.status_of([second])
    assert status.used == 600 and status.left == 1400
    entries = list(AuditEntry.objects.filter(action="budget.set").order_by("pk"))
    assert [e.target for e in entries] == ["account nlp", "account nlp"]
    assert entries[1].detail["tokens"] == 2000 and entries[1].detail["replaced"]["tokens"] == 1000
    assert entries[1].actor_name == "test-setup"


def test_a_raise_replaces_the_standing_budget_until_its_date(tree):
    standing = budgets.set_budget(SETUP, membership=tree.alice, tokens=100, period="week")
    until = timezone.now() + dt.timedelta(days=2)
    raised = budgets.set_budget(SETUP, membership=tree.alice, tokens=500, period="week", until=until)
    assert raised.pk != standing.pk
    now = timezone.now().timestamp()
    assert budget_status.in_force([standing, raised], now) == [raised]
    later = budgets.set_budget(SETUP, membership=tree.alice, tokens=800, period="week",
                               until=until + dt.timedelta(days=1))
    assert set(Budget.objects.values_list("pk", flat=True)) == {standing.pk, later.pk}  # one raise at a time
    budgets.remove_budget(SETUP, later)
    assert list(Budget.objects.all()) == [standing]
    removed = AuditEntry.objects.get(action="budget.remove")
    assert removed.target == "alice in nlp" and removed.detail["tokens"] == 800


@pytest.mark.parametrize(("arguments", "field"), [
    ({"tokens": 0, "period": "month"}, "tokens"),
    ({"tokens": 10, "period": "rolling"}, "window_hours"),
    ({"tokens": 10, "period": "day", "window_hours": 5}, "window_hours"),
    ({"tokens": 10, "period": "fortnight"}, "period"),
    ({"tokens": 10, "period": "day", "until": timezone.now() - dt.timedelta(hours=1)}, "until"),
])
def test_mistakes_are_refused_naming_the_field_and_change_nothing(tree, arguments, field):
    with pytest.raises(ValidationError) as refused:
        budgets.set_budget(SETUP, account=tree.lab, **arguments)
    assert field in refused.value.message_dict
    assert not Budget.objects.exists() and not AuditEntry.objects.filter(action__startswith="budget").exists()


def test_a_budget_has_exactly_one_holder(tree):
    with pytest.raises(ValidationError, match="exactly one holder"):
        budgets.set_budget(SETUP, account=tree.lab, membership=tree.alice, tokens=10, period="day")


def test_the_command_sets_a_users_budget_in_their_default_account_audited_with_its_command_line(tree):
    out = command("set_budget", "--user", "alice", "--tokens", "5000", "--period", "day")
    assert "Budget of alice in nlp: 5,000 tokens per day." in out
    budget = Budget.objects.get()
    assert budget.membership == tree.alice
    entry = AuditEntry.objects.get(action="budget.set")
    assert entry.actor_name.startswith("os:")
    assert entry.detail["command"] == "manage.py set_budget --user alice --tokens 5000 --period day"


def test_the_command_raises_a_budget_through_a_day_and_removes_the_raise(tree):
    command("set_budget", "--account", "lab", "--tokens", "100", "--period", "month")
    day = (timezone.localdate() + dt.timedelta(days=3)).isoformat()
    out = command("set_budget", "--account", "lab", "--tokens", "900", "--period", "month", "--until", day)
    assert "until" in out
    raised = Budget.objects.get(until__isnull=False)
    assert timezone.localtime(raised.until).date().isoformat() > day  # through that day: ends the midnight after
    command("set_budget", "--account", "lab", "--period", "month", "--until", day, "--remove")
    assert list(Budget.objects.values_list("tokens", flat=True)) == [100]
    assert AuditEntry.objects.filter(action="budget.remove", target="account lab").exists()


def test_the_command_sets_a_keys_and_a_rolling_budget(tree, cast):
    prefix = ApiKey.objects.get(pk=cast["carol"].key_id).prefix
    command("set_budget", "--key", prefix, "--tokens", "300", "--period", "rolling", "--window-hours", "6")
    budget = Budget.objects.get()
    assert budget.key_id == cast["carol"].key_id and budget.window_hours == 6


@pytest.mark.parametrize(("args", "words"), [
    (["--account", "nowhere", "--tokens", "1", "--period", "day"], "--account: No account named 'nowhere'"),
    (["--user", "mallory", "--tokens", "1", "--period", "day"], "--user: No user named 'mallory'"),
    (["--user", "alice", "--in", "lab", "--tokens", "1", "--period", "day"], "--in: alice is not a member of 'lab'"),
    (["--key", "gp-nothing", "--tokens", "1", "--period", "day"], "--key: No key starts 'gp-nothing'"),
    (["--account", "lab", "--tokens", "0", "--period", "day"], "--tokens: A budget is at least 1 token"),
    (["--account", "lab", "--tokens", "5", "--period", "rolling"], "--window-hours: A rolling budget needs"),
    (["--account", "lab", "--tokens", "5", "--period", "day", "--until", "2001-01-01"], "--until: A raise ends in"),
    (["--account", "lab", "--tokens", "5", "--period", "day", "--until", "tomorrow"], "not a date like"),
    (["--account", "lab", "--tokens", "5"], "--period is needed"),
    (["--account", "lab", "--period", "day"], "--tokens is needed"),
    (["--account", "lab", "--in", "nlp", "--tokens", "5", "--period", "day"], "--in goes with --user"),
    (["--account", "lab", "--period", "day", "--remove"], "has no standing budget per day"),
])
def test_the_command_explains_mistakes_and_changes_nothing(tree, args, words):
    with pytest.raises(CommandError, match=words.replace("(", r"\(")):
        command("set_budget", *args)
    assert not Budget.objects.exists()


def test_the_listing_command_shows_used_left_and_reset(tree):
    budget = budgets.set_budget(SETUP, account=tree.nlp, tokens=5_000_000, period="month")
    use(budget, 4_000_000, 150_000)
    out = command("budgets")
    line = next(row for row in out.splitlines() if row.startswith("nlp "))
    assert "5.0 M" in line and "4.0 M" in line and "150 k" in line and "850 k" in line and "83%" in line
    assert "resets 1 " in line  # the first of next month
