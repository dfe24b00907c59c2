"""Budget windows on an injected clock: calendar days, weeks and months begin at midnight in the
portal's time zone (across a clock change too), a rolling window is what it says, and a raise
replaces the standing budget only until its date."""

import datetime as dt
import zoneinfo

import pytest

from fairness.gateway.budget_rules import BudgetRule, windows

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def rule(period: str, budget_id: int = 1, until: float | None = None, hours: int | None = None) -> BudgetRule:
    return BudgetRule(budget_id, ("account", 3), "account nlp", 5_000_000, period, hours, until)


def at(*args: int) -> float:
    return dt.datetime(*args, tzinfo=BERLIN).timestamp()


@pytest.fixture(autouse=True)
def berlin(settings) -> None:
    settings.TIME_ZONE = "Europe/Berlin"


def test_a_month_runs_from_local_midnight_on_the_first_to_the_next_first():
    (window,) = windows((rule("month"),), at(2026, 12, 31, 23, 30))
    assert window.window_start == at(2026, 12, 1) and window.resets_at == at(2027, 1, 1)
    assert window.words == ("account nlp has used its 5.0 M tokens for December; resets 1 Jan 00:00 CET")
    (january,) = windows((rule("month"),), at(2027, 1, 1, 0, 0, 1))
    assert january.window_start == at(2027, 1, 1) and january.field != window.field


def test_a_day_across_the_spring_clock_change_is_23_hours_and_ends_at_midnight():
    (window,) = windows((rule("day"),), at(2027, 3, 28, 12))
    assert window.window_start == at(2027, 3, 28) and window.resets_at == at(2027, 3, 29)
    assert window.resets_at - window.window_start == 23 * 3600


def test_a_week_starts_on_monday():
    (window,) = windows((rule("week"),), at(2026, 12, 3, 9))  # a Thursday
    assert window.window_start == at(2026, 11, 30) and window.resets_at == at(2026, 12, 7)


def test_a_rolling_window_is_its_length_and_says_so():
    (window,) = windows((rule("rolling", hours=24),), at(2026, 12, 3, 9))
    assert window.rolling_seconds == 86_400 and window.field.endswith("|r3600")
    assert "of the last 24 h" in window.words


def test_a_raise_replaces_the_standing_budget_only_until_its_date():
    until = at(2026, 12, 10)
    rules = (rule("month", 1), rule("month", 2, until=until))
    assert [w.budget_id for w in windows(rules, at(2026, 12, 5))] == [2]
    assert [w.budget_id for w in windows(rules, at(2026, 12, 11))] == [1]
    # Another period of the same holder stands beside it.
    assert [w.budget_id for w in windows((*rules, rule("day", 3)), at(2026, 12, 5))] == [2, 3]
