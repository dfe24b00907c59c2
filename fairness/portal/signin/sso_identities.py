"""Which portal user an OpenID provider's account signs in as (SsoIdentity), and a superuser's
link of an existing account to one.

A provider's account is its issuer and subject, never its username. The first sign-in of a
subject makes a new user (audited as `oidc`) named from the username claim, made to fit Django's
rules (letters, digits and @ . + - _; lower case; 150 characters) and, when that name meets any
existing user's, given a suffix: a provider's `root` or `alice` becomes `root-2` or `alice-2`,
never the local one. Only such accounts take the provider's e-mail address. An existing account
is reached only through a link a superuser made on purpose (link(), audited), and staff are
never signed in by SSO at all (the sign-in refuses them, oidc_backend).

An account SSO made before identities were kept (the username was the match then) is taken over
by the first sign-in that names it exactly, once: only accounts the provider had made, and only
while none is linked.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction

from fairness.actions import account_origin
from fairness.actions.audit import Actor, audit
from fairness.actions.users import create_user
from fairness.models import SsoIdentity

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger(__name__)

USERNAME_MAX = 150  # Django's username column
ISSUER_MAX = SUBJECT_MAX = 255  # SsoIdentity's columns; OpenID Connect caps `sub` at 255 too
EMAIL_MAX = 254
FALLBACK_USERNAME = "user"  # for a claim with nothing usable in it
_NOT_IN_A_USERNAME = re.compile(r"[^\w.@+-]+")  # the complement of UnicodeUsernameValidator's set
_EDGES = ".-"  # stripped from both ends: no "..", no name that reads as a path step or an option


@dataclass(frozen=True)
class Claimed:
    """Who the provider says signed in."""

    issuer: str
    subject: str
    username: str  # the username claim as sent
    email: str  # "" when absent, unverified or not an address that fits

    def describe(self) -> dict[str, str]:
        """For the audit log: the claim cut short, so a provider cannot fill a row."""
        return {"issuer": self.issuer, "subject": self.subject, "claimed_username": self.username[:200]}


def username_from_claim(claim: str) -> str:
    """A username Django's validator accepts, from whatever the provider sent: `Lab/Alice` is
    `lab-alice`; longer than the column, cut (leaving room for a suffix is unique_username's)."""
    name = _NOT_IN_A_USERNAME.sub("-", unicodedata.normalize("NFKC", claim).lower()).strip(_EDGES)
    name = name[:USERNAME_MAX].strip(_EDGES) or FALLBACK_USERNAME
    UnicodeUsernameValidator()(name)  # holds by construction; a slip here must fail, not save
    return name


def unique_username(base: str) -> str:
    """`base`, or `base-2`, `base-3`…: the first that no user's name matches without regard to
    case, so `Root` never sits beside `root`."""
    users = get_user_model().objects
    for n in count(1):
        suffix = "" if n == 1 else f"-{n}"
        candidate = base[:USERNAME_MAX - len(suffix)] + suffix
        if not users.filter(username__iexact=candidate).exists():
            return candidate
    raise AssertionError("unreachable")


def user_for(actor: Actor, claimed: Claimed) -> User:
    """The user this provider account signs in as: its linked one, or one made for it now. Two
    first sign-ins at once meet the unique constraints, and the loser looks again."""
    for _ in range(3):
        try:
            return _find_or_make(actor, claimed)
        except IntegrityError:
            log.info("SSO sign-in of %s met another one making the same account; looking again", claimed.subject)
    return _find_or_make(actor, claimed)


def _find_or_make(actor: Actor, claimed: Claimed) -> User:
    with transaction.atomic():
        identity = (SsoIdentity.objects.select_related("user")
                    .filter(issuer=claimed.issuer, subject=claimed.subject).first())
        if identity is None:
            identity = _adopt(actor, claimed) or _make(actor, claimed)
        user = identity.user
        if identity.made_user and claimed.email and claimed.email != user.email:
            user.email = claimed.email  # the provider's to change: it made the account
            user.save(update_fields=["email"])
        return user


def _adopt(actor: Actor, claimed: Claimed) -> SsoIdentity | None:
    """An account the username-matching sign-in made, before identities were kept."""
    user = get_user_model().objects.filter(username=claimed.username).first()
    if user is None or user.sso_identities.exists() or not account_origin.made_by(user.get_username(), "oidc"):
        return None
    identity = SsoIdentity.objects.create(issuer=claimed.issuer, subject=claimed.subject, user=user, made_user=True)
    audit(actor, "user.sso_link", user.get_username(), how="made by SSO before identities",
                  **claimed.describe())
    return identity


def _make(actor: Actor, claimed: Claimed) -> SsoIdentity:
    username = unique_username(username_from_claim(claimed.username))
    user = create_user(actor, username, claimed.email, False, None, **claimed.describe())
    return SsoIdentity.objects.create(issuer=claimed.issuer, subject=claimed.subject, user=user, made_user=True)


def link_refusal(actor: User | None, user: User, issuer: str, subject: str) -> str:
    """Why `actor` may not link `user` to this identity ("" when they may). A link lets the
    provider's account sign in as the user: a superuser's decision (or the command line's, which
    has the host already), never for staff, and never for an identity someone has already."""
    if actor is not None and not actor.is_superuser:
        return "Only a superuser may link an account to an SSO identity."
    if user.is_staff or user.is_superuser:
        return f"{user.get_username()} is staff: staff sign in with their password, never by SSO."
    if not issuer or len(issuer) > ISSUER_MAX:
        return "The issuer is 1 to 255 characters (GP_OIDC_ISSUER, as the provider writes it)."
    if not subject or len(subject) > SUBJECT_MAX:
        return "The subject is 1 to 255 characters (the `sub` the provider gives this person)."
    if account_origin.is_directory_account(user.get_username()):
        return f"{user.get_username()} signs in with {account_origin.DIRECTORY}."
    holder = SsoIdentity.objects.filter(issuer=issuer, subject=subject).select_related("user").first()
    if holder is not None:
        return (f"That identity signs in as {holder.user.get_username()} already: delete that user first if "
                "the identity should be this one's.")
    return ""


def link(actor: Actor, user: User, issuer: str, subject: str) -> SsoIdentity:
    """Links an existing account to a provider's account; raises PermissionDenied, audited, when
    link_refusal() says no. The account keeps its e-mail address: the provider did not make it."""
    reason = link_refusal(actor.user, user, issuer, subject)
    if reason:
        audit(actor, "user.sso_link.refused", user.get_username(), reason=reason, issuer=issuer[:ISSUER_MAX],
                      subject=subject[:SUBJECT_MAX])
        raise PermissionDenied(reason)
    with transaction.atomic():
        identity = SsoIdentity.objects.create(issuer=issuer, subject=subject, user=user, made_user=False)
        audit(actor, "user.sso_link", user.get_username(), how="linked", issuer=issuer, subject=subject)
    return identity
