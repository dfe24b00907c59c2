"""Memberships from an identity provider's groups (GroupMapping: group → account + tier), for
every source of groups: the OIDC sign-in now, an LDAP backend later.

At each sign-in the person's memberships follow their groups: they join the account of every
mapped group they are in (the first, by group name, becomes their default when they have none)
and leave the mapped accounts whose groups they left. Memberships staff made in accounts no group
maps to are never touched. Someone in no mapped group has no access: the sign-in is refused and
they are deactivated, which stops their keys on every gateway (401 `owner_inactive`); their
memberships stay as they were, so a return to a mapped group restores them.

A deactivation by staff stands: only a deactivation this sync made is undone by it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import transaction

from fairness.actions import accounts
from fairness.actions.audit import Actor, audit
from fairness.actions.users import set_user_active
from fairness.models import Account, AuditEntry, GroupMapping, Membership, Tier

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# The audit log's name for each source of groups, as `Actor.name` (no user: nobody signed in yet).
SYNC_ACTORS = ("oidc", "ldap")


def sync_actor(source: str, ip: str | None = None) -> Actor:
    assert source in SYNC_ACTORS
    return Actor(None, ip, name=source)


@dataclass(frozen=True)
class Synced:
    accounts: list[str]  # the mapped accounts they are in now, default first among them
    added: list[str]
    removed: list[str]

    @property
    def has_access(self) -> bool:
        return bool(self.accounts)


def mappings_for(groups: Iterable[str]) -> list[GroupMapping]:
    return list(GroupMapping.objects.filter(group__in=set(groups)).select_related("account", "tier").order_by("group"))


@transaction.atomic
def sync_memberships(actor: Actor, user: User, groups: Iterable[str]) -> Synced:
    """Each change audited (account.add_member, account.remove_member)."""
    wanted: dict[int, Account] = {}
    for mapping in mappings_for(groups):
        wanted.setdefault(mapping.account_id, mapping.account)
    if not wanted:
        return Synced([], [], [])
    have = {m.account_id: m for m in Membership.objects.filter(user=user).select_related("account")}
    added = []
    for account_id, account in wanted.items():
        if account_id not in have:
            have[account_id] = accounts.add_member(actor, account, user)
            added.append(account.name)
    first = have[next(iter(wanted))]
    mapped = set(GroupMapping.objects.values_list("account_id", flat=True))
    removed = []
    for account_id, membership in list(have.items()):
        if account_id in mapped and account_id not in wanted:
            accounts.remove_member(actor, membership, successor=first)
            removed.append(membership.account.name)
    return Synced([account.name for account in wanted.values()], added, removed)


def withdraw_access(actor: Actor, user: User) -> None:
    """Deactivate someone in no mapped group. Staff are left active (refused at this sign-in
    only): switching staff off is a superuser's decision, and a mapping slip must not lock
    every staff member out of the portal, password sign-in included."""
    if user.is_staff or user.is_superuser or not user.is_active:
        return
    set_user_active(actor, user, False)


def restore_access(actor: Actor, user: User) -> None:
    """Reactivate someone back in a mapped group, if it was a sync that deactivated them."""
    if user.is_active:
        return
    last = (AuditEntry.objects.filter(target=user.get_username(), action__in=["user.deactivate", "user.reactivate"])
            .order_by("-pk").first())
    if last is not None and last.action == "user.deactivate" and last.actor_id is None \
            and last.actor_name in SYNC_ACTORS:
        set_user_active(actor, user, True)


def mapped_tier(membership: Membership) -> Tier | None:
    """The tier the group mapping of the membership's account gives (for keys people make
    themselves); None for an account no group maps to."""
    mapping = (GroupMapping.objects.filter(account=membership.account_id).select_related("tier")
               .order_by("group").first())
    return mapping.tier if mapping else None


@transaction.atomic
def add_mapping(actor: Actor, group: str, account: Account, tier: Tier) -> GroupMapping:
    """Raises ValidationError for an empty or already-mapped group."""
    mapping = GroupMapping(group=group.strip(), account=account, tier=tier)
    mapping.full_clean()
    mapping.save()
    audit(actor, "group_mapping.add", mapping.group, account=account.name, tier=tier.name)
    return mapping


@transaction.atomic
def remove_mapping(actor: Actor, mapping: GroupMapping) -> None:
    """Members keep their memberships until their next sign-in; the account then counts as
    unmapped, so staff's hand is on them again."""
    group, account, tier = mapping.group, mapping.account.name, mapping.tier.name
    mapping.delete()
    audit(actor, "group_mapping.remove", group, account=account, tier=tier)

