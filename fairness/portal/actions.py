"""What staff do, in one place for the pages and the admin API: every action is audited."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from fairness.gateway.api_keys import hash_secret, issue_key, mint_secret
from fairness.models import AdminToken, ApiKey, AuditEntry, Replica, SaturationAlert, Tier
from fairness.scheduling.directory import conflict_if_saved


@dataclass(frozen=True)
class Actor:
    """Who acts, and from where (for the audit log)."""

    user: AbstractBaseUser
    ip: str | None = None


def audit(actor: Actor, action: str, target: str, **detail) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor.user, actor_name=actor.user.get_username(), action=action, target=target,
        detail=detail, ip=actor.ip,
    )


@transaction.atomic
def issue(actor: Actor, owner: AbstractBaseUser, tier: Tier, label: str = "",
          expires_at: dt.datetime | None = None) -> tuple[ApiKey, str]:
    key, secret = issue_key(owner, tier, label=label, expires_at=expires_at)
    audit(actor, "key.issue", key.prefix, owner=owner.get_username(), tier=tier.name, label=label,
          expires_at=expires_at.isoformat() if expires_at else None)
    return key, secret


@transaction.atomic
def revoke(actor: Actor, key: ApiKey) -> ApiKey:
    key.revoke()
    audit(actor, "key.revoke", key.prefix, owner=key.owner.get_username())
    return key


@transaction.atomic
def rotate(actor: Actor, key: ApiKey, grace_seconds: int = 0) -> tuple[ApiKey, str]:
    """A new secret for the same owner, tier and label; the old one stops after the grace."""
    new, secret = issue_key(key.owner, key.tier, label=key.label, expires_at=key.expires_at)
    if grace_seconds > 0:
        ends = timezone.now() + dt.timedelta(seconds=grace_seconds)
        key.expires_at = min(ends, key.expires_at) if key.expires_at else ends
        key.save(update_fields=["expires_at"])
    else:
        key.revoke()
    audit(actor, "key.rotate", key.prefix, new=new.prefix, grace_seconds=grace_seconds)
    return new, secret


@transaction.atomic
def create_user(actor: Actor, username: str, email: str = "", is_staff: bool = False,
                password: str | None = None) -> AbstractBaseUser:
    user = get_user_model().objects.create_user(username=username, email=email, password=password)
    if is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    audit(actor, "user.create", username, is_staff=is_staff)
    return user


@transaction.atomic
def set_password(actor: Actor, user: AbstractBaseUser, password: str) -> AbstractBaseUser:
    """For a user created without one (the set-password step); the password is never logged."""
    user.set_password(password)
    user.save(update_fields=["password"])
    audit(actor, "user.password", user.get_username())
    return user


@transaction.atomic
def set_user_tier(actor: Actor, user: AbstractBaseUser, tier: Tier) -> int:
    """Moves every live key of the user to the tier; new requests follow at once."""
    keys = ApiKey.objects.filter(owner=user, revoked_at=None)
    changed = 0
    for key in keys:  # save() per key: its signal tells the gateways
        key.tier = tier
        key.save(update_fields=["tier"])
        changed += 1
    audit(actor, "user.tier", user.get_username(), tier=tier.name, keys=changed)
    return changed


@transaction.atomic
def save_tier(actor: Actor, tier: Tier, changed: dict) -> Tier:
    """`tier` already validated (full_clean) by the caller."""
    creating = tier.pk is None
    tier.save()
    audit(actor, "tier.create" if creating else "tier.update", tier.name, **_jsonable(changed))
    return tier


@transaction.atomic
def save_replica(actor: Actor, replica: Replica, changed: dict) -> Replica:
    creating = replica.pk is None
    replica.save()
    detail = {k: v for k, v in _jsonable(changed).items() if k != "api_key"}  # never log a secret
    audit(actor, "replica.create" if creating else "replica.update", replica.name, **detail)
    return replica


@transaction.atomic
def set_replica_state(actor: Actor, replica: Replica, state: str) -> Replica:
    """enable, disable, or drain (finish in-flight, accept nothing new).

    Raises ValidationError when enabling it would make deployments overlap (see replicas.py).
    """
    if state != "disable" and not replica.enabled:
        replica.enabled = True
        conflict = conflict_if_saved(replica)
        if conflict:
            replica.enabled = False
            raise ValidationError(conflict)
    replica.enabled = state != "disable"
    replica.draining = state == "drain"
    replica.save(update_fields=["enabled", "draining"])
    audit(actor, f"replica.{state}", replica.name)
    return replica


@transaction.atomic
def acknowledge(actor: Actor, alert: SaturationAlert) -> SaturationAlert:
    if alert.acknowledged_at is None:
        alert.acknowledged_at = timezone.now()
        alert.acknowledged_by = actor.user
        alert.save(update_fields=["acknowledged_at", "acknowledged_by"])
        audit(actor, "alert.acknowledge", f"{alert.model}/{alert.kind}", alert=alert.pk)
    return alert


@transaction.atomic
def issue_admin_token(actor: Actor, owner: AbstractBaseUser, label: str = "") -> tuple[AdminToken, str]:
    secret = "gpa-" + mint_secret()[3:]
    token = AdminToken.objects.create(owner=owner, label=label, prefix=secret[:12], secret_hash=hash_secret(secret))
    audit(actor, "admin_token.issue", token.prefix, owner=owner.get_username())
    return token, secret


def _jsonable(values: dict) -> dict:
    return {k: (v if isinstance(v, (str, int, float, bool, type(None))) else str(v)) for k, v in values.items()}
