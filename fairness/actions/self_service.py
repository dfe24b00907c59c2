"""Researchers' own keys: the rules of /me/keys/, checked here once for the page and any caller.

- **Which tier.** The tier of their most recent live key: staff move all of a user's live keys
  at once (set_user_tier), so that is the tier their keys use. With no live key, the
  tier a sign-in group mapping gives one of their accounts, their default account first. With
  neither, staff issue their first key.
- **Whether at all.** Only on a tier with `self_service_keys` on; a key of a tier with it off is
  made and rotated by staff alone, as the tier's setting says. Its owner may still revoke it:
  whoever sees their secret leak must be able to stop it at once, and a revoke only takes away.
- **How many.** At most `GP_MAX_KEYS_PER_USER` live keys, counting those staff issued and an old
  key still in its grace after a rotation.
- **How long.** No longer than the tier's `max_key_days` (no limit when empty); a rotated key
  keeps its expiry, shortened to that limit.
- **How much.** A key's own limits and models (KeyLimits) are within its tier's, never above, on
  a tier with self-service keys; on another, staff set them.

Every change still goes through fairness.actions, which audits it and records the user as
the key's `created_by`.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from fairness.accounting.key_expiry import session_key_prefixes
from fairness.actions.audit import Actor
from fairness.actions.keys import issue, revoke, rotate, set_limits
from fairness.models import NO_KEY_LIMITS, ApiKey, GroupMapping, KeyLimits, Membership, Tier

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class Refused(Exception):
    """What the researcher may not do, in a sentence for the page."""


def live_keys(user: User, now: dt.datetime) -> QuerySet[ApiKey]:
    """The live keys they hold: not the playground's, which end with a browser session
    (actions/playground.py), so take no place among the most one may hold nor give a tier."""
    return (ApiKey.objects.filter(Q(expires_at=None) | Q(expires_at__gt=now), owner=user, revoked_at=None)
            .exclude(prefix__in=session_key_prefixes()))


def memberships(user: User) -> QuerySet[Membership]:
    """The associations a key of theirs may charge: their own, and nobody else's."""
    return Membership.objects.filter(user=user).select_related("account").order_by("-is_default", "account__name")


def own_tier(user: User, now: dt.datetime) -> Tier | None:
    """The tier their new keys get (see the module's rules); None: staff issue their first key."""
    latest = live_keys(user, now).select_related("tier").order_by("-created_at", "-pk").first()
    if latest is not None:
        return latest.tier
    for membership in memberships(user):
        mapping = GroupMapping.objects.filter(account=membership.account).select_related("tier").order_by("group")
        if (found := mapping.first()) is not None:
            return found.tier
    return None


def max_keys() -> int:
    return int(settings.GP_MAX_KEYS_PER_USER)


def refusal(user: User, tier: Tier | None, now: dt.datetime) -> str:
    """Why `user` may not make a key now ("" when they may)."""
    reason = access_refusal(user, tier)
    if reason:
        return reason
    if live_keys(user, now).count() >= max_keys():
        return (f"You have {max_keys()} live keys, the most anyone may hold: revoke one you no longer "
                "need to make another.")
    return ""


def access_refusal(user: User, tier: Tier | None) -> str:
    """Why `user` may have no key of their own at all ("" when they may), however many they hold."""
    if not user.is_active:  # deactivated since this request signed in (the row is read locked)
        return "Your account is no longer active: ask staff if that is a mistake."
    if tier is None:
        return ("Your first key is issued by staff: you have no live key yet, and none of your accounts "
                "comes with a tier for keys you make yourself.")
    if not tier.self_service_keys:
        return f"Keys of tier {tier.name} are managed by staff: ask them for a new key."
    return ""


def rotate_refusal(key: ApiKey) -> str:
    """Why its owner may not rotate `key` on their page ("" when they may)."""
    if session_key_prefixes().filter(target=key.prefix).exists():
        return f"{key.prefix}… is the playground's key for one browser session: it ends with the session."
    if not key.tier.self_service_keys:
        return f"Keys of tier {key.tier.name} are rotated by staff: ask them for a new secret for {key.prefix}…."
    return ""


def longest_expiry(tier: Tier, now: dt.datetime) -> dt.datetime | None:
    return now + dt.timedelta(days=tier.max_key_days) if tier.max_key_days else None


def _locked(user: User) -> User:
    """The user's row locked for the transaction: two forms sent at once cannot both take the
    last free place (PostgreSQL; SQLite runs one write transaction at a time anyway)."""
    locked: User = get_user_model().objects.select_for_update().get(pk=user.pk)
    return locked


@transaction.atomic
def issue_own(actor: Actor, label: str, days: int | None, membership: Membership | None = None,
              now: dt.datetime | None = None, limits: KeyLimits = NO_KEY_LIMITS) -> tuple[ApiKey, str]:
    """A key for the actor themselves. Raises Refused, or ValidationError for limits above the
    tier's; `membership` None: their default account."""
    assert actor.user is not None, "a researcher's own action has a signed-in user"
    now = now or timezone.now()
    user = _locked(actor.user)
    tier = own_tier(user, now)
    reason = refusal(user, tier, now)
    if reason:
        raise Refused(reason)
    assert tier is not None  # refusal() says why otherwise
    if membership is not None and membership.user_id != user.pk:
        raise Refused("A key of yours charges one of your own accounts.")
    if tier.max_key_days and (days is None or days > tier.max_key_days):
        raise Refused(f"Keys of tier {tier.name} live at most {tier.max_key_days} days.")
    expires_at = now + dt.timedelta(days=days) if days else None
    return issue(actor, user, tier, label, expires_at, membership, limits=limits)


def limits_refusal(key: ApiKey) -> str:
    """Why its owner may not change `key`'s limits on their page ("" when they may)."""
    if not key.tier.self_service_keys:
        return f"The limits of tier {key.tier.name}'s keys are set by staff."
    if key.revoked_at is not None or key.is_expired():
        return f"{key.prefix}… no longer works."
    return ""


@transaction.atomic
def set_own_limits(actor: Actor, key: ApiKey, limits: KeyLimits) -> ApiKey:
    """One of the actor's own keys narrowed (or let back up to its tier). Raises Refused, or
    ValidationError by field for a figure above the tier's."""
    assert actor.user is not None and key.owner_id == actor.user.pk, "the caller checked the key is theirs"
    reason = limits_refusal(key)
    if reason:
        raise Refused(reason)
    return set_limits(actor, key, limits)


@transaction.atomic
def rotate_own(actor: Actor, key: ApiKey, grace_seconds: int = 0,
               now: dt.datetime | None = None) -> tuple[ApiKey, str]:
    """A new secret for one of the actor's own live keys. Raises Refused."""
    assert actor.user is not None and key.owner_id == actor.user.pk, "the caller checked the key is theirs"
    now = now or timezone.now()
    user = _locked(actor.user)
    reason = rotate_refusal(key)
    if reason:
        raise Refused(reason)
    if key.revoked_at is not None or key.is_expired(now):
        raise Refused(f"{key.prefix}… no longer works: make a new key instead.")
    if grace_seconds > 0 and live_keys(user, now).count() >= max_keys():
        raise Refused(f"You have {max_keys()} live keys, the most anyone may hold, and a grace period keeps the "
                      "old one live beside the new: rotate it at once, or revoke a key first.")
    return rotate(actor, key, grace_seconds, latest_expiry=longest_expiry(key.tier, now))


@transaction.atomic
def revoke_own(actor: Actor, key: ApiKey) -> ApiKey:
    """Revokes one of the actor's own keys, whatever its tier (see the module's rules)."""
    assert actor.user is not None and key.owner_id == actor.user.pk, "the caller checked the key is theirs"
    return revoke(actor, key)
