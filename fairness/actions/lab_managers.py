"""Lab managers: a member whose membership says `is_manager` looks after that account and every
account under it, as staff would, but only there and only within what staff gave the account.

- **Where.** The accounts they manage and their sub-accounts (`managed`); never the account's
  parent, a sibling, or anything staff-wide (tiers, replicas, users).
- **Members.** They add existing, active users by name and remove members; a manager's own
  membership, and any other manager's, is staff's to change (a manager cannot take a colleague's
  role away, nor make anyone a manager).
- **Keys.** For a member, charged to a managed account, on the tier the member would get for a
  key of their own (self_service.own_tier) and by the same rules (the tier's self-service
  setting, its longest life, the most live keys one may hold). They revoke keys that charge a
  managed account, and no others.
- **Shares.** Members' shares in a managed account, and sub-accounts' shares among siblings;
  never the shares of an account they were given (its share of its parent is staff's).
- **Budgets.** On sub-accounts and members of managed accounts, never larger than the tightest
  budget of the same period on the account they were given or above it (that budget holds the
  whole subtree anyway: this keeps the words true). The budgets of the given account are staff's.

Every change goes through the same audited actions staff use, so the audit log names the manager.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from fairness.actions import accounts, budgets, keys, self_service
from fairness.actions.audit import Actor, audit
from fairness.models import Account, ApiKey, Budget, Membership, Tier

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def given_accounts(user: User) -> list[Account]:
    """The accounts staff made them a manager of."""
    if not user.is_active:
        return []
    return [m.account for m in Membership.objects.filter(user=user, is_manager=True).select_related("account")]


def managed(user: User) -> list[Account]:
    """Every account they manage: those given and everything under them, in tree order."""
    found: dict[int, Account] = {}
    frontier = given_accounts(user)
    while frontier:
        fresh = [account for account in frontier if account.pk not in found]
        found.update((account.pk, account) for account in fresh)
        frontier = list(Account.objects.filter(parent__in=fresh)) if fresh else []
    return sorted(found.values(), key=lambda account: account.name)


def check_manages(user: User, account: Account) -> None:
    """Raises PermissionDenied unless `user` manages `account`."""
    if account.pk not in {a.pk for a in managed(user)}:
        raise PermissionDenied(f"You do not manage {account.name}.")


def _is_given(user: User, account: Account) -> bool:
    return Membership.objects.filter(user=user, account=account, is_manager=True).exists()


def _manager(actor: Actor) -> User:
    assert actor.user is not None, "a manager's action has a signed-in user"
    return actor.user


@transaction.atomic
def set_manager(actor: Actor, membership: Membership, is_manager: bool) -> Membership:
    """Staff's: make a member the manager of their account, or no longer."""
    if membership.is_manager != is_manager:
        membership.is_manager = is_manager
        membership.save(update_fields=["is_manager"])
        audit(actor, "account.set_manager", membership.account.name, user=membership.user.get_username(),
              manager=is_manager)
    return membership


def add_member(actor: Actor, account: Account, username: str, shares: int | None = None) -> Membership:
    """Raises PermissionDenied outside their accounts, ValidationError for no such active user."""
    from django.contrib.auth import get_user_model

    check_manages(_manager(actor), account)
    user = get_user_model().objects.filter(username=username.strip(), is_active=True).first()
    if user is None:
        raise ValidationError({"username": f"No active user named {username.strip()!r}: staff add new people."})
    return accounts.add_member(actor, account, user, shares=shares)


def _check_other_member(actor: Actor, membership: Membership) -> None:
    check_manages(_manager(actor), membership.account)
    if membership.is_manager:
        raise PermissionDenied(f"{membership.user.get_username()} manages {membership.account.name}: "
                               "staff change a manager's membership.")


def remove_member(actor: Actor, membership: Membership) -> None:
    _check_other_member(actor, membership)
    accounts.remove_member(actor, membership)


def set_member_shares(actor: Actor, membership: Membership, shares: int) -> Membership:
    check_manages(_manager(actor), membership.account)
    return accounts.add_member(actor, membership.account, membership.user, shares=shares)


def add_sub_account(actor: Actor, parent: Account, name: str, shares: int = 1) -> Account:
    """A sub-account allows the models its parent allows (it inherits them), no others."""
    check_manages(_manager(actor), parent)
    return accounts.add_account(actor, name, parent=parent, shares=shares)


def set_sub_account_shares(actor: Actor, account: Account, shares: int) -> Account:
    manager = _manager(actor)
    check_manages(manager, account)
    if _is_given(manager, account) or account.parent is None:
        raise PermissionDenied(f"{account.name}'s share of its parent is set by staff.")
    return accounts.change_account(actor, account, shares=shares)


def _ceiling(account: Account, period: str) -> int | None:
    """The tightest standing or live budget of `period` on `account` or above it: what no budget
    beneath may exceed."""
    chain: list[Account] = []
    node: Account | None = account
    while node is not None:
        chain.append(node)
        node = node.parent
    now = timezone.now()
    tokens = [b.tokens for b in Budget.objects.filter(account__in=chain, period=period)
              if b.until is None or b.until > now]
    return min(tokens) if tokens else None


def set_budget(actor: Actor, holder: Account | Membership, tokens: int, period: str,
               window_hours: int | None = None, until: dt.datetime | None = None) -> Budget:
    """A budget on a sub-account or a member of a managed account."""
    manager = _manager(actor)
    account = holder if isinstance(holder, Account) else holder.account
    check_manages(manager, account)
    if isinstance(holder, Account) and _is_given(manager, holder):
        raise PermissionDenied(f"{holder.name}'s own budget is set by staff.")
    start = account if isinstance(holder, Membership) else (account.parent or account)
    ceiling = _ceiling(start, period)
    if ceiling is not None and tokens > ceiling:
        raise ValidationError({"tokens": f"At most {ceiling:,}: the {period} budget staff gave "
                                         "covers everything under it."})
    if isinstance(holder, Account):
        return budgets.set_budget(actor, account=holder, tokens=tokens, period=period,
                                  window_hours=window_hours, until=until)
    return budgets.set_budget(actor, membership=holder, tokens=tokens, period=period,
                              window_hours=window_hours, until=until)


def remove_budget(actor: Actor, budget: Budget) -> None:
    manager = _manager(actor)
    if budget.key_id is not None:
        raise PermissionDenied("A key's budget is set by staff.")
    account = budget.account if budget.account is not None else budget.membership.account  # type: ignore[union-attr]
    check_manages(manager, account)
    if budget.account is not None and _is_given(manager, budget.account):
        raise PermissionDenied(f"{budget.account.name}'s own budget is set by staff.")
    budgets.remove_budget(actor, budget)


@transaction.atomic
def issue_key(actor: Actor, membership: Membership, label: str = "", days: int | None = None,
              now: dt.datetime | None = None) -> tuple[ApiKey, str]:
    """A key for a member, charged to the managed account: raises PermissionDenied outside their
    accounts, self_service.Refused where the member could not have made it themselves."""
    check_manages(_manager(actor), membership.account)
    now = now or timezone.now()
    member = membership.user
    tier = self_service.own_tier(member, now)
    reason = _key_refusal(member, tier, now)
    if reason:
        raise self_service.Refused(reason)
    assert tier is not None
    if tier.max_key_days and (days is None or days > tier.max_key_days):
        raise self_service.Refused(f"Keys of tier {tier.name} live at most {tier.max_key_days} days.")
    expires_at = now + dt.timedelta(days=days) if days else None
    return keys.issue(actor, member, tier, label, expires_at, membership)


def _key_refusal(member: User, tier: Tier | None, now: dt.datetime) -> str:
    """Why a manager may not make `member` a key now, in the manager's words ("" when they may)."""
    name = member.get_username()
    if not member.is_active:
        return f"{name} is deactivated: keys are for active users only."
    if tier is None:
        return (f"{name}'s first key is issued by staff: they have no live key yet, and none of their "
                "accounts comes with a tier for keys.")
    if not tier.self_service_keys:
        return f"Keys of tier {tier.name} are managed by staff: ask them for {name}'s key."
    if self_service.live_keys(member, now).count() >= self_service.max_keys():
        return f"{name} has {self_service.max_keys()} live keys, the most anyone may hold."
    return ""


def revoke_key(actor: Actor, key: ApiKey) -> ApiKey:
    """Only a key that charges a managed account."""
    if key.membership is None:
        raise PermissionDenied("That key charges no account you manage.")
    check_manages(_manager(actor), key.membership.account)
    return keys.revoke(actor, key)
