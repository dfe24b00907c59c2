"""Accounts and memberships (the fair-share tree): staff's audited changes. (Every key's default
association is default_membership.py's.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction

from fairness.actions.audit import Actor, audit
from fairness.models import Account, ApiKey, Membership

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# Shares are relative, so a bound costs nothing; it keeps a typo from overflowing the column.
MAX_SHARES = 1_000_000


def _check_shares(shares: int) -> None:
    if not 1 <= shares <= MAX_SHARES:
        raise ValidationError({"shares": f"Shares are a whole number from 1 to {MAX_SHARES:,}."})


@transaction.atomic
def add_account(actor: Actor, name: str, parent: Account | None = None, shares: int = 1,
                description: str = "", allowed_models: list[str] | None = None) -> Account:
    """Raises ValidationError for a bad or taken name, shares out of range or a bad model name
    (`allowed_models` empty or None: every model)."""
    _check_shares(shares)
    account = Account(name=name, parent=parent, shares=shares, description=description,
                      allowed_models=allowed_models or [])
    account.full_clean()
    account.save()
    restricted = {"allowed_models": account.allowed_models} if account.allowed_models else {}
    audit(actor, "account.add", name, parent=parent.name if parent else None, shares=shares, **restricted)
    return account


@transaction.atomic
def change_account(actor: Actor, account: Account, *, shares: int | None = None,
                   parent: Account | None = None, move: bool = False,
                   allowed_models: list[str] | None = None) -> Account:
    """Change its shares, (with `move`) its parent (None: to the top) and/or the models it
    allows (None keeps them, [] allows every model). Raises ValidationError for shares out of
    range, a parent under the account itself or a bad model name."""
    if shares is not None:
        _check_shares(shares)
    changed: dict[str, object] = {}
    if shares is not None and shares != account.shares:
        changed["shares"] = [account.shares, shares]
        account.shares = shares
    if allowed_models is not None and allowed_models != account.allowed_models:
        changed["allowed_models"] = [account.allowed_models, allowed_models]
        account.allowed_models = allowed_models
    if move and parent != account.parent:
        changed["parent"] = [account.parent.name if account.parent else None, parent.name if parent else None]
        account.parent = parent
    account.full_clean()
    account.save()
    if changed:
        audit(actor, "account.change", account.name, **changed)
    return account


@transaction.atomic
def add_member(actor: Actor, account: Account, user: User, *, default: bool = False,
               shares: int | None = None) -> Membership:
    """Add `user` to `account` (or change their shares there; None: 1 for a new member, the
    same for one already there); `default`: their keys that name no account charge this one
    from now on."""
    if shares is not None:
        _check_shares(shares)
    membership, created = Membership.objects.get_or_create(
        account=account, user=user, defaults={"shares": shares or 1}
    )
    if shares is not None and not created and membership.shares != shares:
        membership.shares = shares
        membership.save(update_fields=["shares"])
    if default and not membership.is_default:
        Membership.objects.filter(user=user, is_default=True).update(is_default=False)
        membership.is_default = True
        membership.save(update_fields=["is_default"])
    elif not Membership.objects.filter(user=user, is_default=True).exists():
        membership.is_default = True  # a user's first account is their default
        membership.save(update_fields=["is_default"])
    audit(actor, "account.add_member", account.name, user=user.get_username(), shares=membership.shares,
          default=membership.is_default, created=created)
    return membership


@transaction.atomic
def remove_member(actor: Actor, membership: Membership, *, successor: Membership | None = None) -> None:
    """Take a user out of an account. Their keys that charge it charge `successor` from now on
    (None: their oldest other membership), which also becomes their default if this one was.
    Raises ValidationError when keys charge it and they have no other account to move to.
    The membership's own budgets and fair-share history go with it."""
    user = membership.user
    if successor is None:
        successor = Membership.objects.filter(user=user).exclude(pk=membership.pk).order_by("pk").first()
    keys = list(ApiKey.objects.filter(membership=membership))
    if keys and successor is None:
        raise ValidationError(f"{user.get_username()}'s keys charge {membership.account} "
                              "and they have no other account.")
    for key in keys:  # save() per key: its signal tells the gateways
        key.membership = successor
        key.save(update_fields=["membership"])
    was_default = membership.is_default
    account = membership.account.name
    membership.delete()
    if was_default and successor is not None:
        successor.is_default = True
        successor.save(update_fields=["is_default"])
    audit(actor, "account.remove_member", account, user=user.get_username(),
          keys_moved=[key.prefix for key in keys], moved_to=successor.account.name if successor else None,
          default=successor.account.name if was_default and successor else None)
