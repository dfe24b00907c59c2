"""One person's standing, as a Slurm user reads theirs from a login node: `sshare -u me` (their
accounts, shares, decayed usage, fair-share factor, the budgets over them) and `sprio` (what makes
up the queue rank of a request they would send now, and of each of theirs waiting now), with their
usage per day in both units.
What /api/me/standing and /me/standing/ show; nothing of anyone else's but their accounts' totals.

The rank is admission's (scheduling/lua/lib/queue.lua and fair_share.lua): a waiting request's
score is its arrival time, less its tier's head start, plus a fair-share delay of the tier's
fairshare_weight_seconds × (1 - F); the lowest score goes first, so every second waited counts
one second towards the front. Here each part is in seconds of rank, the sign turned so that more
is better, as sprio's priorities are: head start minus that delay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import RedisError

from fairness.accounting.fair_share_usage import LiveUsage
from fairness.gateway.associations import charged_membership
from fairness.models import Account, ApiKey, Membership, Replica
from fairness.portal.reports import fair_share, usage_units
from fairness.portal.reports.budgets import BudgetLine, lines_for_user
from fairness.portal.reports.queries import key_load, load_of_key
from fairness.portal.reports.tier_policy import duration_in_words
from fairness.scheduling.admission import Admission
from fairness.scheduling.standing import Queued, standing_of
from fairness.store.redis_clients import redis_async
from fairness.telemetry.queue_state import wait_in_words

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class AccountStanding:
    """One of the person's associations, with its account's figures beside theirs."""

    account: str
    is_default: bool
    shares: int  # theirs among the account's members
    norm_shares: float  # S: their share of the whole card
    account_shares: int  # the account's among its siblings
    account_norm_shares: float
    usage: float  # their decayed weighted tokens in this account
    account_usage: float  # everyone's in the account and the accounts under it
    effective_usage: float  # U: their part of everyone's decayed usage
    fair_share: float  # F = 2^(-U/S)
    sentence: str
    budgets: tuple[BudgetLine, ...]  # their own in the account, and the account's and those above it

    @property
    def usage_over_share(self) -> float | None:
        return self.effective_usage / self.norm_shares if self.norm_shares > 0 else None


@dataclass(frozen=True)
class Priority:
    """The rank a request sent now on one of their keys starts with, part by part (seconds)."""

    key: str  # the key's prefix
    label: str
    tier: str
    account: str | None  # the account it charges; None: none (fair share leaves it alone)
    head_start: float  # the tier's: it ranks as if it had waited this long already
    fair_share_factor: float | None  # F of the association it charges
    fair_share_weight: float  # the most rank the tier lets usage cost
    fair_share: float  # what usage costs it now: -(weight × (1 - F)), 0 or less
    running: int  # the person's requests running in this tier (all their keys of it)
    running_cap: int
    waiting: int

    @property
    def age(self) -> float:
        return 0.0  # sent now; it gains a second of rank every second it waits

    @property
    def priority(self) -> float:
        """Seconds of rank at arrival, more going first: 0 with no head start and nothing taken off."""
        return self.age + self.head_start + self.fair_share

    @property
    def sentence(self) -> str:
        start = f"A request sent now on {self.key}… ({self.tier})"
        parts = [f"{start} starts with {_seconds(self.head_start)} of head start" if self.head_start > 0
                 else f"{start} has no head start"]
        if self.account is None:
            parts.append(", and fair share leaves it alone: the key charges no account")
        elif self.fair_share_weight <= 0:
            parts.append(f", and fair share is off in {self.tier}")
        elif -self.fair_share < 0.05:
            parts.append(f", and fair share takes nothing off it (your factor in {self.account} is "
                         f"{self.fair_share_factor or 1.0:.2f})")
        else:
            parts.append(f", less {_seconds(-self.fair_share)} for fair share (your factor in {self.account} is "
                         f"{self.fair_share_factor or 0.0:.2f}; at most "
                         f"{_seconds(self.fair_share_weight)} in this tier)")
        net = self.priority
        if net > 0:
            parts.append(f": it ranks as if it had already waited {_seconds(net)}.")
        elif net < 0:
            parts.append(f": it ranks as if it had come {_seconds(-net)} later than it did.")
        else:
            parts.append(": it ranks by its arrival alone.")
        parts.append(" Every second it waits moves it a second nearer the front.")
        if self.running >= self.running_cap:
            parts.append(f" You run {self.running} of the {self.running_cap} requests {self.tier} lets you "
                         "run at once, so it waits for one of yours to finish whatever its rank.")
        return "".join(parts)


@dataclass(frozen=True)
class Waiting:
    """One of their requests waiting now, with the parts of its rank (sprio's pending job)."""

    model: str
    request: Queued

    @property
    def eta_words(self) -> str:
        return "over an hour" if self.request.eta is None else wait_in_words(self.request.eta)


@dataclass(frozen=True)
class MyStanding:
    accounts: list[AccountStanding]
    key_budgets: list[BudgetLine]  # on their keys themselves
    priority: list[Priority]  # one per live key
    waiting: list[Waiting] | None  # None: admission could not be read
    days: list[usage_units.Day]
    total: usage_units.Day
    weights: usage_units.Weights
    half_life_hours: float

    @property
    def budgets(self) -> list[BudgetLine]:
        """Every budget over them once (an account's holds each of its members' associations)."""
        seen: set[int] = set()
        out = []
        for line in [*(line for a in self.accounts for line in a.budgets), *self.key_budgets]:
            if line.budget.pk not in seen:
                seen.add(line.budget.pk)
                out.append(line)
        return out


def _seconds(value: float) -> str:
    """Whole seconds in words; a fraction of one as it is ("0.4 seconds")."""
    if round(value) or value == 0:
        return duration_in_words(value)
    return f"{value:.1f} seconds"


def _ancestors(account_id: int, parents: Mapping[int, int | None]) -> set[int]:
    out: set[int] = set()
    at: int | None = account_id
    while at is not None and at not in out:
        out.add(at)
        at = parents.get(at)
    return out


def _accounts(user: User, usage: LiveUsage, budgets: list[BudgetLine]) -> list[AccountStanding]:
    rows = {(r.account, r.user): r for r in fair_share.rows(usage)}
    memberships = {m.account.name: m for m in Membership.objects.filter(user=user).select_related("account")}
    parents = dict(Account.objects.values_list("pk", "parent_id"))
    out = []
    for standing in fair_share.standing_of(user, usage):
        membership = memberships[standing.account]
        mine = standing.row
        account = rows.get((standing.account, ""), mine)
        over = _ancestors(membership.account_id, parents)
        out.append(AccountStanding(
            account=standing.account, is_default=standing.is_default,
            shares=mine.raw_shares, norm_shares=mine.norm_shares,
            account_shares=account.raw_shares, account_norm_shares=account.norm_shares,
            usage=mine.raw_usage, account_usage=account.raw_usage, effective_usage=mine.effective_usage,
            fair_share=mine.fair_share, sentence=standing.sentence(),
            budgets=tuple(line for line in budgets if line.budget.membership_id == membership.pk
                          or line.budget.account_id in over),
        ))
    return out


def _priority(user: User, accounts: list[AccountStanding]) -> list[Priority]:
    now = timezone.now()
    # A front end's key is left out: its requests rank as the people it names, not as its owner.
    keys = (ApiKey.objects.filter(owner=user, revoked_at=None, front_end="")
            .filter(Q(expires_at=None) | Q(expires_at__gt=now))
            .select_related("tier").order_by("tier__name", "created_at"))
    names = dict(Membership.objects.filter(user=user).values_list("pk", "account__name"))
    factors = {a.account: a.fair_share for a in accounts}
    load = key_load()
    out = []
    for key in keys:
        membership = charged_membership(key)
        account = names.get(membership) if membership is not None else None
        factor = factors.get(account) if account is not None else None
        weight = key.tier.fairshare_weight_seconds
        running, waiting = load_of_key(key, load)
        out.append(Priority(
            key=key.prefix, label=key.label, tier=key.tier.name, account=account,
            head_start=key.tier.head_start_seconds, fair_share_factor=factor, fair_share_weight=weight,
            fair_share=-(weight * (1 - factor)) if factor is not None and weight > 0 else 0.0,
            running=running, running_cap=key.tier.per_key_concurrency, waiting=waiting,
        ))
    return out


async def _waiting(person_id: int, models: Sequence[str]) -> list[Waiting] | None:
    """The person's requests waiting now for each model, first first (as /me/queue.json reads them)."""
    admission = Admission(redis_async())
    out = []
    try:
        for model in models:
            view = await admission.queue_view(model)
            # Off the event loop: a replay may take a while.
            standing = await asyncio.to_thread(standing_of, view, admission.now(), person_id)
            out += [Waiting(model, queued) for queued in standing.mine]
    except (RedisError, OSError):
        return None
    finally:
        await admission.close()
    return out


def standing_for(user: User) -> MyStanding:
    usage = fair_share.current_usage()
    budgets = lines_for_user(user)
    accounts = _accounts(user, usage, budgets)
    days = usage_units.days_of(user)
    return MyStanding(
        accounts=accounts,
        key_budgets=[line for line in budgets if line.holder_kind == "key"],
        priority=_priority(user, accounts),
        waiting=async_to_sync(_waiting)(user.pk, sorted(set(
            Replica.objects.filter(enabled=True).values_list("model", flat=True)))),
        days=days, total=usage_units.total(days), weights=usage_units.weights(),
        half_life_hours=settings.GP_FAIRSHARE_HALF_LIFE_HOURS,
    )
