"""What staff do, in one place for the pages, the admin API and the commands: every action is audited."""

from __future__ import annotations

import datetime as dt
import getpass
import os
import re
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from fairness.batch import control as batch_control
from fairness.batch import retention
from fairness.gateway.api_keys import hash_secret
from fairness.gateway.replica_rows import conflict_if_saved
from fairness.models import AdminToken, ApiKey, AuditEntry, Batch, Membership, Replica, SaturationAlert, Tier
from fairness.portal import account_origin
from fairness.portal.front_end_keys import NONE, FrontEnd
from fairness.portal.keys import issue_key, mint_secret

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class Actor:
    """Who acts, and from where (for the audit log).

    A management command has no signed-in user: `name` then says who ran it and `command` what
    was run (see command_line_actor)."""

    user: User | None
    ip: str | None = None
    name: str = ""
    command: str = ""


def audit(actor: Actor, action: str, target: str, **detail: Any) -> AuditEntry:
    if actor.command:
        detail["command"] = actor.command
    return AuditEntry.objects.create(
        actor=actor.user, actor_name=actor.user.get_username() if actor.user else actor.name, action=action,
        target=target, detail=detail, ip=actor.ip,
    )


MASKED = "[masked]"
# --api-key X, --password=X, --token X: the value is a secret whatever it looks like.
_SECRET_OPTION = re.compile(r"^--?[\w-]*(key|secret|token|password)$", re.IGNORECASE)
_TOKEN_LIKE = re.compile(r"^[A-Za-z0-9_\-+/=.]{20,}$")


def command_line_actor(argv: list[str] | None = None) -> Actor:
    """The actor of a management command: the OS user who ran it and its command line (this
    process's own when not given), with every secret in it masked (even a revoked one has no
    place in the audit log)."""
    command = shlex.join(_masked(sys.argv if argv is None else argv))
    return Actor(None, name=f"os:{_os_user()}", command=command)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # a container's uid with no name in /etc/passwd
        return f"uid-{os.getuid()}"


def _masked(argv: list[str]) -> list[str]:
    masked: list[str] = []
    secret_next = False
    for arg in argv:
        option, equals, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
        if secret_next:
            masked.append(MASKED)
            secret_next = False
        elif option and _SECRET_OPTION.match(option):
            masked.append(f"{option}={MASKED}" if equals else option)
            secret_next = not equals
        elif option and equals:
            masked.append(f"{option}={_masked_value(value)}")
        else:
            masked.append(_masked_value(arg))
    return masked


def _masked_value(value: str) -> str:
    """A key or token secret keeps its visible prefix (shown on every page anyway); anything else
    shaped like a random credential is hidden whole."""
    for start, visible in (("gpa-", 12), ("gp-", 11)):
        if value.startswith(start):
            return value if len(value) <= visible else value[:visible] + "…"
    looks_random = all(any(test(c) for c in value) for test in (str.isupper, str.islower, str.isdigit))
    return MASKED if _TOKEN_LIKE.match(value) and looks_random else value


@transaction.atomic
def issue(actor: Actor, owner: User, tier: Tier, label: str = "",
          expires_at: dt.datetime | None = None, membership: Membership | None = None,
          front_end: FrontEnd = NONE) -> tuple[ApiKey, str]:
    """Raises ValidationError for a deactivated owner (every gateway refuses their keys anyway)
    or an association that is not the owner's. No `membership`: the owner's default account."""
    if not owner.is_active:
        raise ValidationError({"owner": f"{owner.get_username()} is deactivated: keys are for active users only."})
    if membership is not None and membership.user_id != owner.pk:
        raise ValidationError({"account": f"{owner.get_username()} is not a member of {membership.account}."})
    key, secret = issue_key(owner, tier, label=label, expires_at=expires_at, membership=membership,
                            created_by=actor.user, front_end=front_end)
    audit(actor, "key.issue", key.prefix, owner=owner.get_username(), tier=tier.name, label=label,
          account=key.membership.account.name if key.membership else None,
          expires_at=expires_at.isoformat() if expires_at else None,
          **(front_end.audit_detail() if front_end.kind else {}))
    return key, secret


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
    # The new key speaks for the same front end: otherwise its people would all charge its owner.
    new, secret = issue_key(key.owner, key.tier, label=key.label, expires_at=expires_at,
                            membership=key.membership, created_by=actor.user, front_end=FrontEnd.of(key))
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
                password: str | None = None, **detail: str) -> User:
    """`detail` goes to the audit entry (the SSO identity a sign-in made the user for, say)."""
    user = get_user_model().objects.create_user(username=username, email=email, password=password)
    if is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    audit(actor, "user.create", username, is_staff=is_staff, **detail)
    return user


def password_refusal(actor: User | None, user: User, elsewhere: str | None = None) -> str:
    """Why `actor` may not set the password of `user` ("" when they may).

    Nobody gives a local password to someone whose sign-in is the directory's or the provider's
    (account_origin; `elsewhere` is its answer when the caller has it already). Staff set a first
    password for a researcher created without one (the set-password step) and nothing more:
    setting the password of another staff member, a superuser, or anyone who has a password
    already would let them sign in as that person, with that person's powers. Only a superuser
    (or the command line, which has the host already) may."""
    if elsewhere is None:
        elsewhere = account_origin.signs_in_elsewhere(user)
    if elsewhere:
        return (f"{user.get_username()} signs in with {elsewhere}: the portal gives them no password of its own, "
                "which would be a second way in.")
    if actor is None or actor.is_superuser:
        return ""
    if user.is_staff or user.is_superuser:
        return f"Only a superuser may set the password of {user.get_username()}, who is staff."
    if user.password and user.has_usable_password():  # "" (a bare ORM create) signs no one in either
        return f"{user.get_username()} has a password already: only a superuser may replace it."
    return ""


def refuse_password(actor: Actor, user: User, reason: str) -> NoReturn:
    """Audits a refused attempt (outside any transaction the refusal rolls back) and raises."""
    audit(actor, "user.password.refused", user.get_username(), reason=reason)
    raise PermissionDenied(reason)


def set_password(actor: Actor, user: User, password: str) -> User:
    """Raises PermissionDenied, audited, when password_refusal() says no; the password is never
    logged."""
    with transaction.atomic():
        # The row locked and read afresh: two staff at once cannot both set a "first" password.
        target = get_user_model().objects.select_for_update().get(pk=user.pk)
        reason = password_refusal(actor.user, target)
        if not reason:
            target.set_password(password)
            target.save(update_fields=["password"])
            audit(actor, "user.password", target.get_username())
    if reason:
        refuse_password(actor, target, reason)
    user.password = target.password
    return user


def activation_refusal(actor: User | None, user: User) -> str:
    """Why `actor` may not deactivate or reactivate `user` ("" when they may).

    Staff switch researchers on and off. Switching staff or a superuser is a superuser's (a
    staff member could otherwise lock out the people above them), and nobody switches themselves
    off: the last superuser must not be able to lock everyone out by a slip of the mouse."""
    if actor is not None and actor.pk == user.pk:
        return "You cannot deactivate or reactivate yourself."
    if actor is None or actor.is_superuser:
        return ""
    if user.is_staff or user.is_superuser:
        return f"Only a superuser may deactivate or reactivate {user.get_username()}, who is staff."
    return ""


def set_user_active(actor: Actor, user: User, active: bool) -> User:
    """Deactivates (their keys stop on every gateway within about a second: the user's save
    bumps the config epoch, see signals.py, and their sessions end at their next request) or
    reactivates a user. Raises PermissionDenied, audited, when activation_refusal() says no."""
    reason = activation_refusal(actor.user, user)
    if reason:
        audit(actor, "user.activation.refused", user.get_username(), reason=reason, active=active)
        raise PermissionDenied(reason)
    with transaction.atomic():
        if user.is_active != active:
            user.is_active = active
            user.save(update_fields=["is_active"])
            audit(actor, "user.reactivate" if active else "user.deactivate", user.get_username())
    return user


def change_own_password(actor: Actor, user: User, password: str) -> User:
    """Someone changing their own password (they proved the old one); the password is never logged."""
    with transaction.atomic():
        user.set_password(password)
        user.save(update_fields=["password"])
        audit(actor, "user.password.own", user.get_username())
    return user


@transaction.atomic
def set_user_tier(actor: Actor, user: User, tier: Tier) -> int:
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
def save_tier(actor: Actor, tier: Tier, changed: dict[str, Any]) -> Tier:
    """`tier` already validated (full_clean) by the caller."""
    creating = tier.pk is None
    tier.save()
    audit(actor, "tier.create" if creating else "tier.update", tier.name, **_jsonable(changed))
    return tier


@transaction.atomic
def save_replica(actor: Actor, replica: Replica, changed: dict[str, Any],
                 tiers: Iterable[Tier] | None = None) -> Replica:
    """`replica` already validated (full_clean) by the caller; `tiers` None keeps the ones it has.

    The replica and its tiers are one change: a gateway reloads after both, never in between
    (a new replica with no tiers yet would serve every tier), and a failure leaves neither.
    Raises ValidationError when the deployments would overlap (see replica_rows.py).
    """
    tiers = None if tiers is None else list(tiers)
    conflict = conflict_if_saved(replica, None if tiers is None else frozenset(t.name for t in tiers))
    if conflict:
        raise ValidationError({"tiers": conflict})
    creating = replica.pk is None
    replica.save()
    detail = {k: v for k, v in _jsonable(changed).items() if k != "api_key"}  # never log a secret
    if tiers is not None:
        replica.tiers.set(tiers)
        detail["tiers"] = sorted(t.name for t in tiers)
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
def delete_replica(actor: Actor, replica: Replica) -> None:
    """Gateways stop routing to it at their next reload; its samples go with it."""
    name, url = replica.name, replica.base_url
    replica.delete()
    audit(actor, "replica.delete", name, base_url=url)


@transaction.atomic
def acknowledge(actor: Actor, alert: SaturationAlert) -> SaturationAlert:
    if alert.acknowledged_at is None:
        alert.acknowledged_at = timezone.now()
        alert.acknowledged_by = actor.user
        alert.save(update_fields=["acknowledged_at", "acknowledged_by"])
        audit(actor, "alert.acknowledge", f"{alert.model}/{alert.kind}", alert=alert.pk)
    return alert


ADMIN_TOKEN_START = "gpa-"
ADMIN_TOKEN_VISIBLE_CHARS = 12  # "gpa-" and 8 characters, like a key's prefix


@transaction.atomic
def issue_admin_token(actor: Actor, owner: User, label: str = "",
                      expires_at: dt.datetime | None = None) -> tuple[AdminToken, str]:
    """A token acts with all of its owner's powers, so it is for active staff only, and only a
    superuser (or the command line, which has the host already) may make one for someone else:
    otherwise a staff member could borrow a superuser's standing."""
    if not (owner.is_active and owner.is_staff):
        raise ValidationError(f"{owner.get_username()} is not active staff: admin tokens are for staff only.")
    if actor.user is not None and actor.user.pk != owner.pk and not actor.user.is_superuser:
        raise PermissionDenied("Only a superuser may issue an admin token for someone else.")
    secret = ADMIN_TOKEN_START + mint_secret()[3:]
    token = AdminToken.objects.create(owner=owner, label=label, prefix=secret[:ADMIN_TOKEN_VISIBLE_CHARS],
                                      secret_hash=hash_secret(secret), expires_at=expires_at)
    audit(actor, "admin_token.issue", token.prefix, owner=owner.get_username(), label=label,
          expires_at=expires_at.isoformat() if expires_at else None)
    return token, secret


@transaction.atomic
def revoke_admin_token(actor: Actor, token: AdminToken) -> AdminToken:
    """The token stops at its next request: the admin API looks it up afresh every time."""
    if token.revoked_at is None:  # a second revocation changes nothing, so it is not audited
        token.revoke()
        audit(actor, "admin_token.revoke", token.prefix, owner=token.owner.get_username())
    return token


@transaction.atomic
def cancel_batch(actor: Actor, batch: Batch) -> bool:
    """Its owner or staff stop a batch: its runner finishes it as cancelled with what it has done.
    False, and nothing audited, when it was past cancelling already (finishing, ended, or being
    cancelled by a click before this one)."""
    cancelled = batch_control.cancel(batch)
    if cancelled:
        audit(actor, "batch.cancel", batch.public_id, owner=batch.owner.get_username(), key=batch.api_key.prefix)
    return cancelled


@transaction.atomic
def free_storage(actor: Actor, owner: User) -> retention.Freed:
    """Staff delete one person's ended batches and their files that no unfinished batch needs.
    The audit says how much, never what the files held."""
    freed = retention.free_person(owner.pk)
    audit(actor, "storage.free", owner.get_username(), batches=freed.batches, files=freed.files, bytes=freed.bytes)
    return freed


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    def plain(value: object) -> bool:
        if isinstance(value, list):  # a list of names (allowed models) stays a list
            return all(isinstance(item, str) for item in value)
        return isinstance(value, (str, int, float, bool, type(None)))

    return {k: (v if plain(v) else str(v)) for k, v in values.items()}
