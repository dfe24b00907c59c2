"""What a lab manager's page shows of one account they manage: its members, the keys that charge
it, its sub-accounts, the budgets beneath it, and the last 30 days' usage of each member and
sub-account in both units (raw tokens, and the weighted tokens fair share and budgets count)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.utils import timezone

from fairness.models import Account, ApiKey, Budget, Membership, UsageRecord
from fairness.portal.reports.budgets import BudgetLine, lines
from fairness.scheduling.fair_share import weighted_tokens

USAGE_DAYS = 30


@dataclass(frozen=True)
class Used:
    requests: int = 0
    prompt: int = 0
    completion: int = 0
    weighted: float = 0.0


@dataclass(frozen=True)
class MemberLine:
    membership: Membership
    used: Used
    live_keys: int


@dataclass(frozen=True)
class SubAccountLine:
    account: Account
    used: Used


@dataclass(frozen=True)
class LabView:
    account: Account
    given: bool  # staff made them its manager (not only an account under one)
    members: list[MemberLine]
    sub_accounts: list[SubAccountLine]
    keys: list[ApiKey]
    budgets: list[BudgetLine]
    days: int = USAGE_DAYS


def subtree(account: Account) -> list[Account]:
    found, frontier = [account], [account]
    while frontier:
        frontier = list(Account.objects.filter(parent__in=frontier))
        found.extend(frontier)
    return found


def _used(records: dict[str, int | None]) -> Used:
    prompt, completion, cached = (int(records.get(f) or 0) for f in ("prompt", "completion", "cached"))
    return Used(
        requests=int(records.get("requests") or 0), prompt=prompt, completion=completion,
        weighted=weighted_tokens(prompt, completion, settings.GP_FAIRSHARE_WEIGHT_PROMPT,
                                 settings.GP_FAIRSHARE_WEIGHT_COMPLETION, cached=cached,
                                 w_cached=settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT),
    )


_SUMS = {"requests": Count("pk"), "prompt": Sum("prompt_tokens"), "completion": Sum("completion_tokens"),
         "cached": Sum("cached_tokens")}


def lab_view(account: Account, given: bool, now: dt.datetime | None = None) -> LabView:
    now = now or timezone.now()
    since = now - dt.timedelta(days=USAGE_DAYS)
    recent = UsageRecord.objects.filter(created_at__gte=since)
    members = list(Membership.objects.filter(account=account).select_related("user").order_by("user__username"))
    by_member = {row["membership"]: row for row in
                 recent.filter(membership__in=members).values("membership").annotate(**_SUMS)}
    live = Q(revoked_at=None) & (Q(expires_at=None) | Q(expires_at__gt=now))
    live_counts = dict(ApiKey.objects.filter(live, membership__in=members).values("membership")
                       .annotate(n=Count("pk")).values_list("membership", "n"))
    children = list(Account.objects.filter(parent=account).order_by("name"))
    sub_lines = []
    for child in children:
        below = subtree(child)
        sums = recent.filter(membership__account__in=below).aggregate(**_SUMS)
        sub_lines.append(SubAccountLine(child, _used(sums)))
    tree = subtree(account)
    return LabView(
        account=account, given=given,
        members=[MemberLine(m, _used(by_member.get(m.pk, {})), live_counts.get(m.pk, 0)) for m in members],
        sub_accounts=sub_lines,
        keys=list(ApiKey.objects.filter(live, membership__account=account).select_related("owner", "tier")
                  .order_by("owner__username", "created_at")),
        budgets=lines(Budget.objects.filter(Q(account__in=tree) | Q(membership__account__in=tree)),
                      now.timestamp()),
    )
