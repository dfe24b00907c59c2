"""Users: creating one, passwords (who may set whose), activation and their keys' tier, audited."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import transaction

from fairness.actions import account_origin
from fairness.actions.audit import Actor, audit
from fairness.models import ApiKey, Tier

if TYPE_CHECKING:
    from django.contrib.auth.models import User


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
