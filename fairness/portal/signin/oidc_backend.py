"""Sign-in with the institution's OpenID provider, on mozilla-django-oidc.

The library runs the authorization-code flow with state, nonce and PKCE and checks the ID
token's signature against the provider's JWKS. (Not django-allauth: it brings a whole account
system, sign-up and e-mail confirmation and its own tables, where all we need is "the
institution says who this is and in which groups".) What we add:

- Discovery, lazily: the endpoints come from `<issuer>/.well-known/openid-configuration`, fetched
  at the first SSO sign-in and kept, and only if the document names the configured issuer. At
  start-up nothing is fetched, so a provider that is down stops SSO sign-in, not the portal.
- The ID token's issuer, audience and expiry are checked too (the library skips the audience);
  an expired or foreign token refuses the sign-in with a page that says so.
- Users are found by the provider's issuer and subject, never by username or e-mail: a new
  subject gets a new user, named from the username claim (GP_OIDC_USERNAME_CLAIM) but never
  another's account (sso_identities). Staff accounts are refused, audited. Memberships follow
  the groups at every sign-in (group_sync).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from fairness.actions.audit import Actor, audit
from fairness.portal.client_address import client_address
from fairness.portal.signin import group_sync, sso_identities

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger(__name__)
# Clocks of the provider and the portal may differ by this much.
LEEWAY_SECONDS = 30


class SignInProblem(Exception):
    """Why an SSO sign-in did not happen, in words for the page (sso_refused.html)."""

    title = "Sign-in refused"
    status = 403

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProviderUnavailable(SignInProblem):
    title = "The institution's sign-in service cannot be reached"
    status = 503


class ProviderMisconfigured(SignInProblem):
    title = "Sign-in with the institution's account is misconfigured"
    status = 503


class SignInRefused(SignInProblem):
    pass


class Discovered(NamedTuple):
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str  # "" when the provider has none: the ID token's claims then suffice


_discovered: dict[str, Discovered] = {}


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def discover(issuer: str | None = None) -> Discovered:
    """The provider's endpoints, fetched once per process. Raises ProviderUnavailable or
    ProviderMisconfigured; a failure is not kept, so the next sign-in tries again."""
    issuer = issuer or settings.GP_OIDC_ISSUER
    found = _discovered.get(issuer)
    if found is not None:
        return found
    url = discovery_url(issuer)
    try:
        response = requests.get(url, timeout=settings.GP_OIDC_TIMEOUT_SECONDS)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        log.warning("OIDC discovery at %s failed: %s", url, exc)
        raise ProviderUnavailable(f"Its discovery document ({url}) could not be read: "
                                  f"{exc.__class__.__name__}.") from exc
    if not isinstance(document, dict) or document.get("issuer") != issuer:
        named = document.get("issuer") if isinstance(document, dict) else None
        raise ProviderMisconfigured(
            f"The provider at {url} says its issuer is {named!r}, but GP_OIDC_ISSUER is {issuer!r}. "
            "They must be identical (a trailing slash counts)."
        )
    missing = [name for name in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not document.get(name)]
    if missing:
        raise ProviderMisconfigured(f"The discovery document at {url} has no {', '.join(missing)}.")
    found = Discovered(document["authorization_endpoint"], document["token_endpoint"], document["jwks_uri"],
                       document.get("userinfo_endpoint") or "")
    _discovered[issuer] = found
    return found


def forget_discovery() -> None:
    """For tests that change the issuer."""
    _discovered.clear()


class SsoBackend(OIDCAuthenticationBackend):  # type: ignore[misc]  # untyped library
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the library's __init__: it reads the endpoints from settings, and Django builds every
        # backend for every sign-in, the password form's included. Endpoints come at authenticate().
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.GP_OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.GP_OIDC_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        # Only the callback's call (it passes the nonce); a password sign-in is not ours.
        if request is None or "nonce" not in kwargs or not settings.GP_OIDC_ISSUER:
            return None
        found = discover()
        self.OIDC_OP_AUTHORIZATION_ENDPOINT = found.authorization_endpoint
        self.OIDC_OP_TOKEN_ENDPOINT = found.token_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = found.jwks_uri
        self.OIDC_OP_USER_ENDPOINT = found.userinfo_endpoint
        try:
            return cast("User | None", super().authenticate(request, **kwargs))  # the untyped library's
        except requests.HTTPError as exc:  # the provider answered, with a refusal (a used code…)
            log.warning("OIDC token or userinfo request refused: %s", exc)
            raise SignInRefused("The institution's sign-in service did not accept this sign-in. "
                                "Start again from the sign-in page.") from exc
        except requests.RequestException as exc:
            raise ProviderUnavailable(f"It did not answer ({exc.__class__.__name__}).") from exc

    def get_user(self, user_id: int) -> User | None:
        # ModelBackend's, not the library's (which skips is_active): the session of someone
        # deactivated, by staff or by a sign-in that found them in no mapped group, ends at its
        # next request, as a password sign-in's does. So does the SSO session of someone made
        # staff since: staff powers never come from an SSO sign-in.
        user = ModelBackend.get_user(self, user_id)
        return None if user is None or user.is_staff or user.is_superuser else user

    def get_payload_data(self, token: str | bytes, key: Any) -> dict[str, Any]:
        """The library checks the signature and expiry; we add the issuer and the audience."""
        try:
            return jwt.decode(
                token, key, algorithms=[self.OIDC_RP_SIGN_ALGO], audience=self.OIDC_RP_CLIENT_ID,
                issuer=settings.GP_OIDC_ISSUER, leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise SignInRefused("The institution's answer had expired before it arrived. Start again; if it "
                                "happens every time, the clocks of the two servers disagree.") from exc
        except jwt.InvalidTokenError as exc:
            log.warning("OIDC ID token refused: %s", exc)
            raise SignInRefused(f"The institution's answer could not be verified ({exc}).") from exc

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The ID token's claims, completed by the userinfo endpoint's: Entra ID puts `groups` in
        the ID token, Keycloak and others (often) only in userinfo."""
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT:
            info = super().get_userinfo(access_token, id_token, payload)
            if info.get("sub") != payload.get("sub"):
                raise SignInRefused("The institution's answers named two different people.")
            claims.update(info)
        return claims

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        username = claims.get(settings.GP_OIDC_USERNAME_CLAIM)
        if not isinstance(username, str) or not username.strip():
            raise SignInRefused(f"The institution's answer has no {settings.GP_OIDC_USERNAME_CLAIM!r} claim "
                                "(GP_OIDC_USERNAME_CLAIM) to name you by.")
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject or len(subject) > sso_identities.SUBJECT_MAX:
            raise SignInRefused("The institution's answer names you by a subject (`sub`) that is not 1 to 255 "
                                "characters, as OpenID Connect has it, so it cannot be kept.")
        return True

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User:
        """The user of the provider's issuer and subject (sso_identities), never one matched by
        username; staff are refused. Then memberships follow the groups."""
        claims = self.get_userinfo(access_token, id_token, payload)
        self.verify_claims(claims)
        actor = self._actor()
        claimed = sso_identities.Claimed(issuer=payload["iss"], subject=payload["sub"],
                                         username=claims[settings.GP_OIDC_USERNAME_CLAIM], email=_email(claims))
        user = sso_identities.user_for(actor, claimed)
        if user.is_staff or user.is_superuser:
            # Staff keep their own password: a provider's account (or a link) must never carry
            # someone into the staff pages.
            audit(actor, "user.sso.refused", user.get_username(), reason="staff", **claimed.describe())
            raise SignInRefused(f"{user.get_username()} is a staff account here, and staff sign in with their "
                                "password, not with the institution's account.")
        groups = claims.get(settings.GP_OIDC_GROUPS_CLAIM) or []
        if isinstance(groups, str):
            groups = [groups]
        synced = group_sync.sync_memberships(actor, user, [g for g in groups if isinstance(g, str)])
        if not synced.has_access:
            group_sync.withdraw_access(actor, user)
            raise SignInRefused("You are in none of the groups that have access to this portal, so your access "
                                "(and your API keys) are suspended. If you should have access, ask your group's "
                                "administrator or the portal's staff.")
        group_sync.restore_access(actor, user)
        return user

    def _actor(self) -> Actor:
        return group_sync.sync_actor("oidc", client_address(self.request))


def _email(claims: dict[str, Any]) -> str:
    """The e-mail claim if it is an address that fits and the provider does not call unverified."""
    email = claims.get("email")
    if not isinstance(email, str) or len(email) > sso_identities.EMAIL_MAX or claims.get("email_verified") is False:
        return ""
    try:
        validate_email(email)
    except ValidationError:
        return ""
    return email
