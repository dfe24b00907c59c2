"""API keys: minting (the secret is returned once and only its hash is stored), and staff's audited
issuing, front ends, limits, revoking and rotating."""

from __future__ import annotations

import datetime as dt
import secrets
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from fairness.actions.audit import Actor, audit
from fairness.actions.default_membership import default_membership
from fairness.actions.front_end_keys import NONE, FrontEnd
from fairness.gateway.api_keys import SECRET_PREFIX, VISIBLE_CHARS, hash_secret
from fairness.models import NO_KEY_LIMITS, ApiKey, KeyLimits, Membership, Tier, check_allowed_models

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def mint_secret() -> str:
    # 32 random bytes: the hash needs no salt or stretching at this entropy.
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def issue_key(
    owner: User,
    tier: Tier,
    *,
    label: str = "",
    expires_at: dt.datetime | None = None,
    membership: Membership | None = None,
    created_by: User | None = None,
    made_by_command: str = "",
    front_end: FrontEnd = NONE,
    limits: KeyLimits = NO_KEY_LIMITS,
    secret: str = "",
) -> tuple[ApiKey, str]:
    """Create a key; the secret is returned once and never stored. It charges `membership`
    (the owner's association with an account), by default the owner's default one. `created_by`:
    who made it (staff, or the owner on their own page); None for a command. `front_end`: the
    front end it speaks for, already checked (front_end_keys.requested). `limits`: already checked
    against the tier (checked_limits). `secret`: one derived elsewhere (the playground's, from a
    session) rather than a fresh one, tried once."""
    if membership is None:
        membership = default_membership(owner)
    elif membership.user_id != owner.pk:
        raise ValueError("a key charges one of its owner's own associations")
    given = secret
    for _ in range(1 if given else 5):
        secret = given or mint_secret()
        try:
            with transaction.atomic():
                key = ApiKey.objects.create(
                    owner=owner,
                    tier=tier,
                    label=label,
                    prefix=secret[:VISIBLE_CHARS],
                    secret_hash=hash_secret(secret),
                    expires_at=expires_at,
                    membership=membership,
                    created_by=created_by,
                    made_by_command=made_by_command,
                    **front_end.fields(),
                    **limits.fields(),
                )
            return key, secret
        except IntegrityError:  # a prefix collision: vanishingly rare, try another secret
            continue
    raise RuntimeError("could not mint a unique key prefix")


def expiry_in_days(days: int | None) -> dt.datetime | None:
    return timezone.now() + dt.timedelta(days=days) if days else None


@transaction.atomic
def _command_maker(actor: Actor) -> str:
    """Who ran the command that acts, as the audit log names them; "" when someone signed in acts."""
    return "" if actor.user is not None else actor.name[:150]


def checked_limits(limits: KeyLimits, tier: Tier, before: KeyLimits | None = None) -> KeyLimits:
    """`limits` with its models each named once; ValidationError (by field) for a figure above the
    tier's or a model outside it. Given `before`, only the fields that change are held to the tier:
    a figure the tier was lowered under since stays as it was (the gateway applies the lower)."""
    models = tuple(check_allowed_models(list(limits.allowed_models)))
    limits = KeyLimits(limits.max_concurrent, limits.requests_per_minute, limits.tokens_per_minute, models)
    changing = [f for f in KeyLimits.FIELDS if before is None or getattr(limits, f) != getattr(before, f)]
    refusals = limits.refusals(tier, changing)
    if refusals:
        raise ValidationError(refusals)
    return limits


def issue(actor: Actor, owner: User, tier: Tier, label: str = "",
          expires_at: dt.datetime | None = None, membership: Membership | None = None,
          front_end: FrontEnd = NONE, limits: KeyLimits = NO_KEY_LIMITS) -> tuple[ApiKey, str]:
    """Raises ValidationError for a deactivated owner (every gateway refuses their keys anyway),
    an association that is not the owner's, or limits above the tier's. No `membership`: the
    owner's default account."""
    limits = checked_limits(limits, tier)
    if not owner.is_active:
        raise ValidationError({"owner": f"{owner.get_username()} is deactivated: keys are for active users only."})
    if membership is not None and membership.user_id != owner.pk:
        raise ValidationError({"account": f"{owner.get_username()} is not a member of {membership.account}."})
    key, secret = issue_key(owner, tier, label=label, expires_at=expires_at, membership=membership,
                            created_by=actor.user, made_by_command=_command_maker(actor), front_end=front_end,
                            limits=limits)
    audit(actor, "key.issue", key.prefix, owner=owner.get_username(), tier=tier.name, label=label,
          account=key.membership.account.name if key.membership else None,
          expires_at=expires_at.isoformat() if expires_at else None,
          **(front_end.audit_detail() if front_end.kind else {}),
          **({"limits": limits.fields()} if limits != NO_KEY_LIMITS else {}))
    return key, secret


@transaction.atomic
def set_limits(actor: Actor, key: ApiKey, limits: KeyLimits) -> ApiKey:
    """The key's own limits, within its tier (ValidationError by field otherwise). Saving the key
    bumps the config epoch (signals.py): every gateway applies them within a second."""
    before = KeyLimits.of(key)
    limits = checked_limits(limits, key.tier, before)
    for field, value in limits.fields().items():
        setattr(key, field, value)
    key.save(update_fields=list(KeyLimits.FIELDS))
    audit(actor, "key.limits", key.prefix, owner=key.owner.get_username(), tier=key.tier.name,
          before=before.fields(), after=limits.fields())
    return key


@transaction.atomic
def set_front_end(actor: Actor, key: ApiKey, front_end: FrontEnd) -> ApiKey:
    """Saving the key bumps the config epoch (signals.py): every gateway reloads it at once."""
    before = FrontEnd.of(key)
    for field, value in front_end.fields().items():
        setattr(key, field, value)
    key.save(update_fields=list(front_end.fields()))
    audit(actor, "key.front_end", key.prefix, owner=key.owner.get_username(), **front_end.audit_detail(),
          secret_replaced=bool(front_end.sealed_secret) and front_end.sealed_secret != before.sealed_secret)
    return key


@transaction.atomic
def revoke(actor: Actor, key: ApiKey) -> ApiKey:
    key.revoke()
    audit(actor, "key.revoke", key.prefix, owner=key.owner.get_username())
    return key


@transaction.atomic
def rotate(actor: Actor, key: ApiKey, grace_seconds: int = 0,
           latest_expiry: dt.datetime | None = None) -> tuple[ApiKey, str]:
    """A new secret for the same owner, tier and label; the old one stops after the grace. The
    new key keeps the old one's expiry, or `latest_expiry` when that is sooner (a researcher's
    own rotation stays within their tier's longest key life)."""
    expires_at = key.expires_at
    if latest_expiry is not None and (expires_at is None or latest_expiry < expires_at):
        expires_at = latest_expiry
    # The new key speaks for the same front end (otherwise its people would all charge its owner),
    # and is held to the same limits: a rotation must not widen a key.
    new, secret = issue_key(key.owner, key.tier, label=key.label, expires_at=expires_at,
                            membership=key.membership, created_by=actor.user, made_by_command=_command_maker(actor),
                            front_end=FrontEnd.of(key), limits=KeyLimits.of(key))
    key.replaced_by = new
    if grace_seconds > 0:
        ends = timezone.now() + dt.timedelta(seconds=grace_seconds)
        key.expires_at = min(ends, key.expires_at) if key.expires_at else ends
        key.save(update_fields=["expires_at", "replaced_by"])
    else:
        key.revoked_at = key.revoked_at or timezone.now()
        key.save(update_fields=["revoked_at", "replaced_by"])
    audit(actor, "key.rotate", key.prefix, new=new.prefix, grace_seconds=grace_seconds)
    return new, secret
