"""Where budgets stand, for people: each one's used and reserved tokens against its limit, the
part of its period gone by, when it resets, and whether it is on course to run out first. The
staff page, the staff home, the admin API, `manage.py budgets` and /me/ all read these lines."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Q, QuerySet

from fairness.gateway.budget_rules import tokens_in_words
from fairness.models import Account, Budget, Membership
from fairness.telemetry.budget_status import SOFT_LIMIT, BudgetStatus, in_force, status_of

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class BudgetLine:
    status: BudgetStatus
    in_force: bool  # False: a standing budget a live raise replaces for now
    now: float

    @property
    def budget(self) -> Budget:
        return self.status.budget

    @property
    def holder_kind(self) -> str:
        b = self.budget
        return "account" if b.account_id else "user" if b.membership_id else "key"

    @property
    def holder(self) -> str:
        """"nlp", "alice in nlp", "key gp-abc123…"."""
        b = self.budget
        if b.account is not None:
            return b.account.name
        if b.membership is not None:
            return f"{b.membership.user.get_username()} in {b.membership.account.name}"
        return f"key {b.key.prefix}…" if b.key is not None else "nobody"

    @property
    def is_raise(self) -> bool:
        return self.budget.until is not None

    @property
    def limit(self) -> float:
        return self.status.window.limit

    @property
    def over_soft_limit(self) -> bool:
        return self.in_force and self.status.fraction >= SOFT_LIMIT

    @property
    def percent(self) -> str:
        return f"{self.status.fraction:.0%}"

    @property
    def used_width(self) -> str:
        """The bar's settled part, then its reserved part, as CSS widths."""
        return f"{100 * min(1.0, self.status.used / self.limit if self.limit else 1.0):.1f}%"

    @property
    def reserved_width(self) -> str:
        used = min(1.0, self.status.used / self.limit) if self.limit else 1.0
        return f"{100 * max(0.0, min(1.0, self.status.fraction) - used):.1f}%"

    @property
    def elapsed_width(self) -> str:
        return f"{100 * self.status.elapsed:.1f}%"

    @property
    def limit_words(self) -> str:
        return f"{tokens_in_words(self.limit)} tokens"

    @property
    def elapsed_percent(self) -> str:
        return f"{self.status.elapsed:.0%}"

    @property
    def used_words(self) -> str:
        return tokens_in_words(self.status.used)

    @property
    def reserved_words(self) -> str:
        return tokens_in_words(self.status.reserved) if self.status.reserved else ""

    @property
    def until_words(self) -> str:
        return until_words(self.budget.until) if self.budget.until else ""

    @property
    def left_words(self) -> str:
        return f"{tokens_in_words(self.status.left)} left"

    @property
    def span(self) -> str:
        """The period as a phrase: "for December", "of the last 24 h"."""
        b, window = self.budget, self.status.window
        if window.rolling_seconds:
            return f"of the last {b.window_hours or 24} h"
        start = _local(window.window_start)
        if b.period == Budget.Period.DAY:
            return f"for {start:%-d %b}"
        if b.period == Budget.Period.WEEK:
            return f"for the week of {start:%-d %b}"
        return f"for {start:%B}"

    @property
    def resets_at(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.status.window.resets_at, dt.UTC)

    @property
    def resets_words(self) -> str:
        window = self.status.window
        if window.rolling_seconds:
            return f"tokens come back as the {self.budget.window_hours or 24} h window slides"
        return f"resets {_when(window.resets_at)}"

    @property
    def run_out_words(self) -> str:
        """"on course to run out around 21 Dec" when the pace so far uses it up before the reset;
        "used up" when it is; "" otherwise (a rolling window has no pace to speak of)."""
        s, window = self.status, self.status.window
        if s.left <= 0:
            return "used up"
        gone = self.now - window.window_start
        if window.rolling_seconds or gone <= 0 or s.used <= 0:
            return ""
        out_at = self.now + s.left / (s.used / gone)
        if out_at >= window.resets_at:
            return ""
        return f"on course to run out around {_local(out_at):%-d %b %H:%M}" if out_at - self.now < 86_400 \
            else f"on course to run out around {_local(out_at):%-d %b}"

    @property
    def sentence(self) -> str:
        """"nlp has used 83% of its 5.0 M tokens for December; resets 1 Jan 00:00 UTC"."""
        return (f"{self.holder} has used {self.percent} of its {self.limit_words} {self.span}; "
                f"{self.resets_words}")


def _local(moment: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(moment, zoneinfo.ZoneInfo(settings.TIME_ZONE))


def _when(moment: float) -> str:
    local = _local(moment)
    return f"{local:%-d %b %H:%M} {local.tzname()}"


def until_words(until: dt.datetime) -> str:
    return _when(until.timestamp())


def _related(budgets: QuerySet[Budget]) -> QuerySet[Budget]:
    return budgets.select_related("account", "membership__user", "membership__account", "key")


def lines(budgets: QuerySet[Budget], now: float | None = None) -> list[BudgetLine]:
    """The budgets that still matter (a raise past its date does not), each with its status."""
    now = now if now is not None else dt.datetime.now(dt.UTC).timestamp()
    live = [b for b in _related(budgets) if b.until is None or b.until.timestamp() > now]
    forced = {b.pk for b in in_force(live, now)}
    return [BudgetLine(s, s.budget.pk in forced, now) for s in status_of(live, now)]


def all_lines(now: float | None = None) -> list[BudgetLine]:
    out = lines(Budget.objects.all(), now)
    return sorted(out, key=lambda line: (line.holder_kind != "account", line.holder, line.budget.period,
                                         line.is_raise))


def near_limit(now: float | None = None) -> list[BudgetLine]:
    """Budgets in force at or over the soft limit (80%), the fullest first."""
    return sorted((line for line in all_lines(now) if line.over_soft_limit), key=lambda line: -line.status.fraction)


def _with_ancestors(account_ids: set[int]) -> set[int]:
    parents = dict(Account.objects.values_list("pk", "parent_id"))
    out: set[int] = set()
    for account_id in account_ids:
        at: int | None = account_id
        while at is not None and at not in out:
            out.add(at)
            at = parents.get(at)
    return out


def lines_for_user(user: User, now: float | None = None) -> list[BudgetLine]:
    """The budgets in force over a person's keys: their keys' own, their associations', and
    those of their accounts and every account above (an account's shows only its total)."""
    memberships = Membership.objects.filter(user=user)
    accounts = _with_ancestors(set(memberships.values_list("account_id", flat=True)))
    mine = Budget.objects.filter(Q(key__owner=user, key__revoked_at=None) | Q(membership__in=memberships)
                                 | Q(account_id__in=accounts))
    return [line for line in lines(mine, now) if line.in_force]
