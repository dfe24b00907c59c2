"""Token budgets: staff's audited changes (the pages, the admin API and `manage.py set_budget`
all come here), and finding a budget's holder by the names people type.

A standing budget (no `until`) is one per holder and period: setting another changes that row in
place. Admission's counters are the holder's for the period; setting or changing a budget makes
them count at least the usage already recorded in the period (the recount Redis gets after a
restart), so its "used" is the same whether it was set before the period's work or after it.
A raise (`until` in the future) is a row of its own that replaces the standing one until then;
a new raise of the same holder and period replaces the earlier raise, as two at once would only
hold the holder to the smaller.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from typing import TYPE_CHECKING, TypedDict

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from fairness.actions.audit import Actor, audit
from fairness.models import Account, ApiKey, Budget, Membership
from fairness.telemetry import budget_status

if TYPE_CHECKING:
    from django.contrib.auth.models import User

HOLDER_KINDS = ("account", "user", "key")
PERIODS = tuple(Budget.Period.values)


class Holder(TypedDict, total=False):
    """set_budget's holder arguments: exactly one of them."""

    account: Account
    membership: Membership
    key: ApiKey


def holder_of(kind: str, name: str, account: str = "") -> Holder:
    """The holder named: an account by name, a user's association (with `account`, else their
    default account's) or a key by its prefix. Raises ValidationError naming the field
    ("holder" or "account") when there is no such thing."""
    name = name.strip()
    if kind == "account":
        found = Account.objects.filter(name=name).first()
        if found is None:
            raise ValidationError({"holder": f"No account named {name!r}."})
        return {"account": found}
    if kind == "user":
        user: User | None = get_user_model().objects.filter(username=name).first()
        if user is None:
            raise ValidationError({"holder": f"No user named {name!r}."})
        memberships = Membership.objects.filter(user=user).select_related("account", "user")
        membership = (memberships.filter(account__name=account.strip()) if account
                      else memberships.filter(is_default=True)).first()
        if membership is None:
            where = f"a member of {account.strip()!r}" if account else "in any account"
            raise ValidationError({"account" if account else "holder": f"{name} is not {where}."})
        return {"membership": membership}
    if kind == "key":
        prefix = name.rstrip("…").rstrip(".")
        key = ApiKey.objects.filter(prefix=prefix).select_related("owner").first() if prefix else None
        if key is None:
            raise ValidationError({"holder": f"No key starts {name!r}."})
        return {"key": key}
    raise ValidationError({"holder": f"A holder is one of {', '.join(HOLDER_KINDS)}."})


def holder_choices() -> list[tuple[str, list[tuple[str, str]]]]:
    """Every holder a budget may be set on now, grouped for a select: accounts, users in each of
    their accounts, live keys. Each value names its holder as holder_of_choice reads it back:
    "account:nlp", "user:nlp:alice" (account names hold no ":"), "key:gp-AbCd1234"."""
    now = timezone.now()
    members = Membership.objects.filter(user__is_active=True).select_related("user", "account")
    keys = ApiKey.objects.filter(revoked_at=None).exclude(expires_at__lte=now).select_related("owner")
    return [
        ("Accounts (each counts its whole subtree)",
         [(f"account:{name}", name) for name in Account.objects.order_by("name").values_list("name", flat=True)]),
        ("Users in an account", [
            (f"user:{m.account.name}:{m.user.get_username()}",
             f"{m.user.get_username()} in {m.account.name}{' (their default)' if m.is_default else ''}")
            for m in members.order_by("user__username", "account__name")
        ]),
        ("Keys", [
            (f"key:{k.prefix}", f"{k.prefix}… of {k.owner.get_username()}{f', {k.label}' if k.label else ''}")
            for k in keys.order_by("owner__username", "prefix")
        ]),
    ]


def holder_of_choice(value: str) -> Holder:
    """The holder a holder_choices value names (holder_of's checks and errors)."""
    kind, _, name = value.partition(":")
    if kind == "user":
        account, _, username = name.partition(":")
        return holder_of(kind, username, account) if account and username else holder_of(kind, "")
    return holder_of(kind, name)


def end_of_day(day: dt.date) -> dt.datetime:
    """A raise "until 21 Dec" lasts through that day: it ends at the midnight after it."""
    zone = zoneinfo.ZoneInfo(settings.TIME_ZONE)
    return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), zone)


def _check(tokens: int, period: str, window_hours: int | None, until: dt.datetime | None,
           now: dt.datetime) -> None:
    errors: dict[str, str] = {}
    if tokens < 1:
        errors["tokens"] = "A budget is at least 1 token."
    if period not in PERIODS:
        errors["period"] = f"A period is one of {', '.join(PERIODS)}."
    elif period == Budget.Period.ROLLING and not window_hours:
        errors["window_hours"] = "A rolling budget needs the window's length in hours."
    elif period != Budget.Period.ROLLING and window_hours:
        errors["window_hours"] = "Only a rolling budget has a window length."
    if window_hours is not None and window_hours < 1:
        errors["window_hours"] = "A window is at least 1 hour."
    if until is not None and until <= now:
        errors["until"] = "A raise ends in the future; to end one now, remove it."
    if errors:
        raise ValidationError(errors)


def _detail(budget: Budget) -> dict[str, object]:
    return {"tokens": budget.tokens, "period": budget.period, "window_hours": budget.window_hours,
            "until": budget.until.isoformat() if budget.until else None}


@transaction.atomic
def set_budget(actor: Actor, *, account: Account | None = None, membership: Membership | None = None,
               key: ApiKey | None = None, tokens: int, period: str, window_hours: int | None = None,
               until: dt.datetime | None = None) -> Budget:
    """Set a holder's budget (exactly one of `account`, `membership`, `key`) for a period, or with
    `until` raise it until then. Raises ValidationError naming the field at fault."""
    if sum(h is not None for h in (account, membership, key)) != 1:
        raise ValidationError({"holder": "A budget has exactly one holder: an account, a user in an account, "
                                         "or a key."})
    now = timezone.now()
    _check(tokens, period, window_hours, until, now)
    same = Budget.objects.select_for_update().filter(account=account, membership=membership, key=key,
                                                     period=period)
    # A standing budget is changed in place; a raise replaces the holder's live raise.
    earlier = list(same.filter(until=None) if until is None else same.filter(until__gt=now))
    budget = earlier[0] if until is None and earlier else Budget(account=account, membership=membership, key=key)
    before = _detail(budget) if budget.pk else None
    budget.tokens, budget.period, budget.window_hours, budget.until = tokens, period, window_hours, until
    budget.full_clean(exclude=["noticed_period"])
    if budget.pk:
        budget.save(update_fields=["tokens", "period", "window_hours", "until"])
    else:
        budget.save()
    replaced = [b for b in earlier if b.pk != budget.pk]
    for old in replaced:
        old.delete()
    if before is None and replaced:
        before = _detail(replaced[0])
    # Before the commit lets a gateway see the budget: it is held from the first request to the
    # period's work so far, not only to what runs after it was set.
    budget_status.recount(budget)
    audit(actor, "budget.set", budget.holder_name, budget=budget.pk, **_detail(budget), replaced=before)
    return budget


@transaction.atomic
def remove_budget(actor: Actor, budget: Budget) -> None:
    """Remove a budget. Removing a raise puts the holder's standing budget back in force, with
    the period's count so far (a holder's budgets for one period share their counters)."""
    holder, pk, detail = budget.holder_name, budget.pk, _detail(budget)
    budget.delete()
    audit(actor, "budget.remove", holder, budget=pk, **detail)
