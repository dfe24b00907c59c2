"""A key's budgets and rate limits, read once when the key is cached, turned into admission's
arguments per request (the windows depend on the clock: a month ends, a raise runs out).

A key is held to every budget over it: its own, its association's, and those of its account and
every account above it (an account's budget counts its whole subtree's work).
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings

from fairness.models import Account, ApiKey, Budget
from fairness.scheduling.limits import BudgetWindow, RateLimit

if TYPE_CHECKING:
    from fairness.gateway.tier_policy import TierPolicy


@dataclass(frozen=True)
class BudgetRule:
    budget_id: int
    holder: tuple[str, int]  # ("account" | "membership" | "key", pk): a raise replaces its holder's
    holder_words: str  # "project nlp-lab", "alice in nlp-lab", "key gp-abc123…"
    tokens: int
    period: str
    window_hours: int | None
    until: float | None  # a temporary budget: replaces the standing one until then


def rules_for(key: ApiKey, membership_id: int | None) -> tuple[BudgetRule, ...]:
    """Every budget over the key (called from the key loader's thread)."""
    accounts: list[int] = []
    account_id = key.membership.account_id if key.membership is not None else None
    parents = dict(Account.objects.values_list("pk", "parent_id"))
    while account_id is not None and account_id not in accounts:
        accounts.append(account_id)
        account_id = parents.get(account_id)
    budgets = Budget.objects.filter(account_id__in=accounts) | Budget.objects.filter(key_id=key.pk)
    if membership_id is not None:
        budgets = budgets | Budget.objects.filter(membership_id=membership_id)
    return tuple(rule_of(b) for b in budgets.select_related("account", "membership__account", "membership__user"))


def rule_of(budget: Budget) -> BudgetRule:
    if budget.account is not None:
        holder, words = ("account", budget.account.pk), f"account {budget.account.name}"
    elif budget.membership is not None:
        m = budget.membership
        holder, words = ("membership", m.pk), f"{m.user.get_username()} in {m.account.name}"
    else:
        holder, words = ("key", budget.key_id or 0), "this key"
    return BudgetRule(budget.pk, holder, words, budget.tokens, budget.period, budget.window_hours,
                      budget.until.timestamp() if budget.until else None)


# rules -> (from and until when the answer holds, the windows): working the windows out takes ~40 µs of
# time-zone arithmetic, and they change only at a period's end, a raise's end, or (for rolling
# windows, whose reset moves) within a second.
_WINDOWS: dict[tuple[BudgetRule, ...], tuple[float, float, tuple[BudgetWindow, ...]]] = {}
_WINDOWS_MAX = 10_000


def windows(rules: tuple[BudgetRule, ...], now: float) -> tuple[BudgetWindow, ...]:
    """The budgets in force now, each in its current window. A live temporary budget replaces
    its holder's standing one for the same period."""
    cached = _WINDOWS.get(rules)
    if cached is not None and cached[0] <= now < cached[1]:
        return cached[2]
    found = _windows(rules, now)
    ends = [w.resets_at for w in found if not w.rolling_seconds] + [r.until for r in rules if r.until and r.until > now]
    if len(_WINDOWS) >= _WINDOWS_MAX:
        _WINDOWS.clear()
    _WINDOWS[rules] = (now, min([now + 1.0, *ends]), found)
    return found


def _windows(rules: tuple[BudgetRule, ...], now: float) -> tuple[BudgetWindow, ...]:
    live = [r for r in rules if r.until is None or r.until > now]
    raised = {(r.holder, r.period) for r in live if r.until is not None}
    chosen = [r for r in live if r.until is not None or (r.holder, r.period) not in raised]
    return tuple(_window(rule, now) for rule in sorted(chosen, key=lambda r: r.budget_id))


def _window(rule: BudgetRule, now: float) -> BudgetWindow:
    zone = zoneinfo.ZoneInfo(settings.TIME_ZONE)
    kind, pk = rule.holder
    if rule.period == Budget.Period.ROLLING:
        hours = rule.window_hours or 24
        return BudgetWindow(rule.budget_id, f"{kind[0]}{pk}-r{hours}", rule.tokens, 0.0, now + hours * 3600 / 24,
                            hours * 3600.0,
                            f"{rule.holder_words} has used its {tokens_in_words(rule.tokens)} tokens of the "
                            f"last {hours} h; some come back within {hours * 60 // 24} min")
    local = dt.datetime.fromtimestamp(now, zone)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    # Aware arithmetic keeps the wall time, so a day across a clock change still ends at midnight.
    if rule.period == Budget.Period.DAY:
        start, end, span = midnight, midnight + dt.timedelta(days=1), f"for {local:%-d %b}"
    elif rule.period == Budget.Period.WEEK:
        start = midnight - dt.timedelta(days=local.weekday())
        end, span = start + dt.timedelta(days=7), f"for the week of {start:%-d %b}"
    else:
        start = midnight.replace(day=1)
        end = (start + dt.timedelta(days=32)).replace(day=1)
        span = f"for {local:%B}"
    when = f"{end:%-d %b %H:%M} {end.tzname()}"
    return BudgetWindow(
        rule.budget_id, f"{kind[0]}{pk}-{rule.period}", rule.tokens, start.timestamp(), end.timestamp(),
        words=f"{rule.holder_words} has used its {tokens_in_words(rule.tokens)} tokens {span}; resets {when}",
    )


def tokens_in_words(tokens: float) -> str:
    """5.0 M, 250 k, 900."""
    if tokens >= 1_000_000:
        return f"{tokens / 1_000_000:.1f} M"
    if tokens >= 10_000:
        return f"{tokens / 1000:.0f} k"
    return f"{tokens:,.0f}"


def rate_limits(unit: str, tier: TierPolicy) -> tuple[RateLimit, ...]:
    """The tier's limits: per person (`unit`: the person in this tier, across all their keys),
    and for everyone in the tier together."""
    limits = []
    if tier.person_requests_per_minute:
        limits.append(RateLimit(f"{unit}|rpm", tier.person_requests_per_minute,
                                words=f"your {tier.person_requests_per_minute} requests a minute in the "
                                      f"{tier.name} tier, across your keys"))
    if tier.person_tokens_per_minute:
        limits.append(RateLimit(f"{unit}|tpm", tier.person_tokens_per_minute, tokens=True,
                                words=f"your {tier.person_tokens_per_minute:,} tokens a minute in the "
                                      f"{tier.name} tier, across your keys"))
    if tier.requests_per_minute:
        limits.append(RateLimit(f"t{tier.name}|rpm", tier.requests_per_minute,
                                words=f"the {tier.name} tier's {tier.requests_per_minute} requests a minute"))
    if tier.tokens_per_minute:
        limits.append(RateLimit(f"t{tier.name}|tpm", tier.tokens_per_minute, tokens=True,
                                words=f"the {tier.name} tier's {tier.tokens_per_minute:,} tokens a minute"))
    return tuple(limits)
