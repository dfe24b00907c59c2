"""Admin tokens, the credentials scripts use for the admin API: issued and revoked, audited."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from fairness.actions.audit import Actor, audit
from fairness.actions.keys import mint_secret
from fairness.gateway.api_keys import hash_secret
from fairness.models import AdminToken

if TYPE_CHECKING:
    from django.contrib.auth.models import User

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
