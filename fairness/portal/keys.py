"""Minting API keys: the secret is returned once and only its hash is stored."""

from __future__ import annotations

import datetime as dt
import secrets
from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.utils import timezone

from fairness.gateway.api_keys import SECRET_PREFIX, VISIBLE_CHARS, hash_secret
from fairness.models import ApiKey, Membership, Tier
from fairness.portal.default_membership import default_membership
from fairness.portal.front_end_keys import NONE, FrontEnd

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
    front_end: FrontEnd = NONE,
) -> tuple[ApiKey, str]:
    """Create a key; the secret is returned once and never stored. It charges `membership`
    (the owner's association with an account), by default the owner's default one. `created_by`:
    who made it (staff, or the owner on their own page); None for a command. `front_end`: the
    front end it speaks for, already checked (front_end_keys.requested)."""
    if membership is None:
        membership = default_membership(owner)
    elif membership.user_id != owner.pk:
        raise ValueError("a key charges one of its owner's own associations")
    for _ in range(5):
        secret = mint_secret()
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
                    **front_end.fields(),
                )
            return key, secret
        except IntegrityError:  # a prefix collision: vanishingly rare, try another secret
            continue
    raise RuntimeError("could not mint a unique key prefix")


def expiry_in_days(days: int | None) -> dt.datetime | None:
    return timezone.now() + dt.timedelta(days=days) if days else None
