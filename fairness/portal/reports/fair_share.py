"""Where everyone stands: Slurm's `sshare -l`, for the command, the staff page, the admin API and
a researcher's own page. Usage is read live from Redis (accounting/fair_share_usage.py)."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from django.utils import timezone

from fairness.accounting.fair_share_usage import LiveUsage, half_life_seconds, live_usage
from fairness.gateway.associations import association_id, tree_nodes
from fairness.models import Account, Membership
from fairness.scheduling import fair_share

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class Row:
    """One line of the table: an account (user == "") or a member of one."""

    account: str
    user: str
    depth: int  # 0 at the top of the tree; a member sits one below their account
    raw_shares: int
    norm_shares: float  # S: the share of the whole card
    # Decayed weighted tokens (for an account: its whole subtree's): all usage so far, each request's
    # halved every half-life, a running one's counted at its estimate until it ends (what admission ranks by).
    raw_usage: float
    norm_usage: float  # raw_usage over everyone's (Slurm's NormUsage; here the same figure as U)
    effective_usage: float  # U: the share of everyone's decayed usage
    fair_share: float  # F = 2^(-U/S)
    # Slurm's LevelFS: its shares over its siblings' / its usage over its siblings'; None for
    # infinite (nothing used), which JSON cannot carry.
    level_fs: float | None

    @property
    def usage_over_share(self) -> float | None:
        """U / S: 1.0 is exactly one's share, 3.1 is 3.1 times it."""
        return self.effective_usage / self.norm_shares if self.norm_shares > 0 else None


def current_usage() -> LiveUsage:
    return async_to_sync(live_usage)()


def rows(usage: LiveUsage | None = None) -> list[Row]:
    """Every account, depth first by name, each followed by its members."""
    usage = usage if usage is not None else current_usage()
    nodes = tree_nodes()
    shares, level_shares = fair_share.normalised_shares(nodes), fair_share.level_shares(nodes)
    accounts = list(Account.objects.all())
    members = list(Membership.objects.select_related("user").order_by("user__username"))
    children: dict[int | None, list[Account]] = {}
    for account in accounts:
        children.setdefault(account.parent_id, []).append(account)
    members_of: dict[int, list[Membership]] = {}
    for membership in members:
        members_of.setdefault(membership.account_id, []).append(membership)
    total = usage.total

    def used(membership: Membership) -> float:
        return usage.by_association.get(association_id(membership.pk), 0.0)

    def subtree_usage(account: Account) -> float:
        return sum(used(m) for m in members_of.get(account.pk, [])) + sum(
            subtree_usage(child) for child in children.get(account.pk, [])
        )

    def row(account: str, user: str, depth: int, raw: int, node: str, usage_of: float, siblings: float) -> Row:
        norm, part = shares.get(node, 0.0), usage_of / total if total > 0 else 0.0
        level = fair_share.level_fs(level_shares.get(node, 0.0), usage_of, siblings)
        return Row(account, user, depth, raw, norm, usage_of, part, part, fair_share.factor(usage_of, total, norm),
                   None if math.isinf(level) else level)

    out: list[Row] = []

    def walk(parent: int | None, depth: int, seen: frozenset[int], siblings: float) -> None:
        """`siblings`: the usage of everything at this level, the parent's subtree's (LevelFS's U)."""
        for account in sorted(children.get(parent, []), key=lambda a: a.name):
            if account.pk in seen:  # a cycle written around the forms: show it once
                continue
            below = subtree_usage(account)
            out.append(row(account.name, "", depth, account.shares, f"a{account.pk}", below, siblings))
            for m in members_of.get(account.pk, []):
                out.append(row(account.name, m.user.get_username(), depth + 1, m.shares, f"m{m.pk}", used(m), below))
            walk(account.pk, depth + 1, seen | {account.pk}, below)

    walk(None, 0, frozenset(), sum(subtree_usage(a) for a in children.get(None, [])))
    return out


def narrowed(table: list[Row], users: set[str] | None = None, accounts: set[str] | None = None) -> list[Row]:
    """sshare's -u and -A: the rows of `accounts` and everything under them; of those, with
    `users`, only those users' rows and the accounts above them (for the tree to read)."""
    keep = [False] * len(table)
    path: list[int] = []  # the account rows above the current one, one per depth

    def in_scope(above: list[int]) -> list[int]:
        """The part of a path from the first named account down (all of it with no -A)."""
        if accounts is None:
            return above
        named = [n for n, index in enumerate(above) if table[index].account in accounts]
        return above[named[0]:] if named else []

    for index, row in enumerate(table):
        if not row.user:
            path = [*path[:row.depth], index]
            if users is None and in_scope(path):
                keep[index] = True
            continue
        above = in_scope(path[:row.depth])
        if above and (users is None or row.user in users):
            keep[index] = True
            for account_index in above:
                keep[account_index] = True
    return [row for row, kept in zip(table, keep, strict=True) if kept]


@dataclass(frozen=True)
class Standing:
    """One of a user's associations, for their own page."""

    account: str
    is_default: bool
    row: Row
    half_gone_at: dt.datetime  # with no new usage, half of today's is gone by then

    def sentence(self) -> str:
        ratio = self.row.usage_over_share
        when = f"{self.half_gone_at:%A %H:%M} UTC"
        if self.row.raw_usage <= 0 or ratio is None:
            return (f"In {self.account} you have used nothing lately: your requests go ahead of "
                    f"heavier users' in your tier.")
        if ratio > 1.05:
            return (f"In {self.account} you used {ratio:.1f}× your share lately; your requests wait "
                    f"behind lighter users' until it decays: if you send nothing more, it counts half as much "
                    f"by {when}.")
        return (f"In {self.account} you used {ratio:.1f}× your share lately, within it: your "
                f"requests are not held back; if you send nothing more, it counts half as much by {when}.")


def standing_of(user: User, usage: LiveUsage | None = None) -> list[Standing]:
    """The user's associations, default first."""
    by_key = {(r.account, r.user): r for r in rows(usage)}
    half_gone = timezone.now() + dt.timedelta(seconds=half_life_seconds())
    memberships = Membership.objects.filter(user=user).select_related("account").order_by(
        "-is_default", "account__name"
    )
    return [
        Standing(m.account.name, m.is_default, by_key[(m.account.name, user.get_username())], half_gone)
        for m in memberships if (m.account.name, user.get_username()) in by_key
    ]
