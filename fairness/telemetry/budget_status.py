"""Where each budget stands in its current window, from admission's counters in Redis; adding
the database's counts back after Redis lost them, or when a budget is set partway through its
period; and the one-time notice at 80%.

Redis holds the live counters (admission reserves and settles them, lua/lib/limits.lua); the usage
records in the database are the truth they are rebuilt from when Redis restarts empty, so a
restart loses at most what the flush task had not yet written (a couple of seconds).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db.models import Q, QuerySet, Sum
from django.db.models.functions import Least

from fairness.gateway import budget_rules
from fairness.models import Account, Budget, UsageRecord
from fairness.scheduling import fair_share
from fairness.scheduling.limits import ROLLING_BUCKETS, BudgetWindow
from fairness.store import keyspace
from fairness.store.redis_clients import redis_sync
from fairness.telemetry import alerts

log = logging.getLogger(__name__)

SOFT_LIMIT = 0.8  # the share of a budget at which its holders hear of it, once a period
_COUNTED = Path(__file__).with_name("budget_counted.lua").read_text()


@dataclass(frozen=True)
class BudgetStatus:
    budget: Budget
    window: BudgetWindow
    used: float  # weighted tokens settled in the window
    reserved: float  # held by requests running now
    elapsed: float  # the part of the window gone by (rolling: 1)

    @property
    def fraction(self) -> float:
        return (self.used + self.reserved) / self.window.limit if self.window.limit else 1.0

    @property
    def left(self) -> float:
        return max(0.0, self.window.limit - self.used - self.reserved)


def _namespace() -> str:
    return keyspace.admission_namespace(keyspace.PREFIX)


def window_of(budget: Budget, now: float) -> BudgetWindow:
    """The budget's current window, whether or not it is the one in force (a raise may be)."""
    return budget_rules.windows((budget_rules.rule_of(budget),), now)[0]


def in_force(budgets: list[Budget], now: float) -> list[Budget]:
    """Those admission holds requests to now: a live raise replaces its holder's standing one."""
    chosen = {w.budget_id for w in budget_rules.windows(tuple(budget_rules.rule_of(b) for b in budgets), now)}
    return [b for b in budgets if b.pk in chosen]


def status_of(budgets: list[Budget], now: float | None = None) -> list[BudgetStatus]:
    now = now if now is not None else dt.datetime.now(dt.UTC).timestamp()
    client = redis_sync()
    out = []
    for budget in budgets:
        window = window_of(budget, now)
        fields = _used_fields(window, now)
        values = client.hmget(_window_key(window), [*fields, keyspace.ADMISSION_FIELD_BUDGET_RESERVED])
        used = sum(float(v) for v in values[:-1] if v is not None)
        reserved = max(0.0, float(values[-1])) if values[-1] is not None else 0.0
        span = window.resets_at - window.window_start
        elapsed = 1.0 if window.rolling_seconds else min(1.0, max(0.0, (now - window.window_start) / span))
        out.append(BudgetStatus(budget, window, used, reserved, elapsed))
    return out


def _window_key(window: BudgetWindow) -> str:
    """Admission's hash for the window (lua/lib/limits.lua): reserved, and settled (per bucket)."""
    return _namespace() + keyspace.ADMISSION_BUDGET_WINDOW + window.field


def _bucket_seconds(window: BudgetWindow) -> int:
    return max(1, round(window.rolling_seconds / ROLLING_BUCKETS))


def _used_fields(window: BudgetWindow, now: float) -> list[str]:
    settled = keyspace.ADMISSION_FIELD_BUDGET_SETTLED
    if not window.rolling_seconds:
        return [settled]
    current = int(now // _bucket_seconds(window))
    return [f"{settled}{current - i}" for i in range(ROLLING_BUCKETS)]


def holder_keys(budget: Budget) -> Q:
    """The usage records a budget counts: its key's, its association's, or its account subtree's."""
    if budget.key_id:
        return Q(key_id=budget.key_id)
    # A row names the association it charged (a front end's people charge their own); a row
    # written without one charged its key's.
    if budget.membership_id:
        return Q(membership_id=budget.membership_id) | Q(membership=None, key__membership_id=budget.membership_id)
    accounts: set[int] = {budget.account_id or 0}
    frontier = set(accounts)
    while frontier:
        frontier = set(Account.objects.filter(parent_id__in=frontier).values_list("pk", flat=True)) - accounts
        accounts |= frontier
    return Q(membership__account_id__in=accounts) | Q(membership=None, key__membership__account_id__in=accounts)


def _weighted(records: QuerySet[UsageRecord]) -> float:
    """What the gateway charged for these records (fair_share.weighted_tokens, summed: it is
    linear once each row's cached count is at most its prompt)."""
    sums = records.aggregate(p=Sum("prompt_tokens"), c=Sum("completion_tokens"),
                             k=Sum(Least("cached_tokens", "prompt_tokens")))
    return fair_share.weighted_tokens(
        sums["p"] or 0, sums["c"] or 0, settings.GP_FAIRSHARE_WEIGHT_PROMPT, settings.GP_FAIRSHARE_WEIGHT_COMPLETION,
        cached=sums["k"] or 0, w_cached=settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT,
    )


def restore_if_lost(now: float | None = None) -> bool:
    """If Redis lost admission's budget counters (restarted empty), set them from the usage
    records; True when it did."""
    now = now if now is not None else dt.datetime.now(dt.UTC).timestamp()
    client = redis_sync()
    if not client.set(_namespace() + keyspace.ADMISSION_BUDGETS_RESTORED, "1", nx=True):
        return False
    for budget in Budget.objects.all():
        recount(budget, now)
    log.warning("budget counters were missing from Redis; set again from the usage records")
    return True


def recount(budget: Budget, now: float | None = None) -> None:
    """Make one budget's counters in its current window count at least the usage records of its
    holder for the period (shared with any raise): after Redis lost them, and when the budget is
    set or changed partway through a period, which would otherwise start at 0."""
    now = now if now is not None else dt.datetime.now(dt.UTC).timestamp()
    window = window_of(budget, now)
    records = UsageRecord.objects.filter(holder_keys(budget))
    if not window.rolling_seconds:
        start = dt.datetime.fromtimestamp(window.window_start, dt.UTC)
        counts = {keyspace.ADMISSION_FIELD_BUDGET_SETTLED: _weighted(records.filter(created_at__gte=start))}
    else:
        bucket = _bucket_seconds(window)
        counts = {}
        for field in _used_fields(window, now):
            number = int(field.removeprefix(keyspace.ADMISSION_FIELD_BUDGET_SETTLED))
            lo, hi = (dt.datetime.fromtimestamp(number * bucket + d, dt.UTC) for d in (0, bucket))
            counts[field] = _weighted(records.filter(created_at__gte=lo, created_at__lt=hi))
    pairs = [item for field, tokens in counts.items() for item in (field, repr(tokens))]
    redis_sync().eval(_COUNTED, 1, _window_key(window), max(1, int(window.ttl(now))), *pairs)


def _recipients(budget: Budget) -> list[str]:
    User = get_user_model()
    if budget.key_id:
        users = User.objects.filter(api_keys=budget.key_id)
    elif budget.membership_id:
        users = User.objects.filter(memberships=budget.membership_id)
    else:
        users = User.objects.filter(memberships__account_id=budget.account_id or 0)
    staff = User.objects.filter(is_staff=True, is_active=True)
    return sorted({u.email for u in (*users, *staff) if u.email})


def notice_text(status: BudgetStatus) -> str:
    budget = status.budget
    return (f"gpuportal: {budget.holder_name} has used {status.fraction:.0%} of its "
            f"{budget_rules.tokens_in_words(status.window.limit)} tokens "
            f"({status.window.words.split('; ')[-1]}).")


async def send_notices(now: float | None = None) -> int:
    """The one-time 80% notice of each budget in force, per window: e-mail to its holders and
    staff, and the alert webhook. Returns how many went out."""
    now = now if now is not None else dt.datetime.now(dt.UTC).timestamp()

    def due() -> list[BudgetStatus]:
        budgets = in_force(list(Budget.objects.select_related("account", "membership__user",
                                                             "membership__account", "key")), now)
        return [s for s in status_of(budgets, now)
                if s.fraction >= SOFT_LIMIT and s.budget.noticed_period != s.window.field]

    def claim(status: BudgetStatus) -> bool:
        """Mark the window noticed before telling anyone: of two checks at once (two beats, a
        slow run overlapping the next), only the one whose update lands sends the notice."""
        field = status.window.field
        return bool(Budget.objects.filter(pk=status.budget.pk).exclude(noticed_period=field)
                    .update(noticed_period=field))

    sent = 0
    for status in await sync_to_async(due)():
        if not await sync_to_async(claim)(status):
            continue
        text = notice_text(status)
        recipients = await sync_to_async(_recipients)(status.budget)
        if recipients:
            await sync_to_async(send_mail)(text, text, None, recipients, fail_silently=True)
        await alerts.deliver_webhook({"event": "budget_soft_limit", "budget": status.budget.pk,
                                      "holder": status.budget.holder_name, "fraction": status.fraction,
                                      "text": text})
        sent += 1
    return sent

