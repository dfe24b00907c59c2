"""Who a front end's request speaks for.

A front end such as Open WebUI calls with one key for all its users and names the person asking:
a signed HS256 token in X-OpenWebUI-User-Jwt (claims sub, email, name, role, iss "open-webui",
iat, exp; open_webui/utils/headers.py), or, on a key whose staff trust them, the unsigned
X-OpenWebUI-User-Email and -Name headers. The person is found by e-mail, and added on first sight
as a member of the front end's account unless staff turned that off. From then on the request is
that person's: the key is replaced by the key as it speaks for them (their caps, rate limits,
share, budgets, usage rows).

A front end may not speak for staff: whoever controls its user list could otherwise act as the
portal's administrators.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

import jwt
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, close_old_connections, transaction

from fairness.gateway import budget_rules
from fairness.gateway.api_keys import FrontEnd, KeyInfo
from fairness.gateway.associations import association_id, tree_nodes
from fairness.gateway.errors import ApiError
from fairness.gateway.read_through import ReadThrough
from fairness.models import ApiKey, AuditEntry, Membership
from fairness.scheduling.fair_share import normalised_shares
from fairness.scheduling.units import unit_of

log = logging.getLogger(__name__)

JWT_HEADER = "x-openwebui-user-jwt"
EMAIL_HEADER = "x-openwebui-user-email"
NAME_HEADER = "x-openwebui-user-name"
CHAT_HEADER = "x-openwebui-chat-id"  # the conversation: its affinity key
ISSUER = "open-webui"
CLOCK_SKEW_SECONDS = 30.0  # a token issued by a front end whose clock runs a little ahead


def named_email(front_end: FrontEnd, headers: Mapping[str, str], now: float) -> tuple[str, str]:
    """(e-mail, display name) of the person the request names, or ApiError 401."""
    token = headers.get(JWT_HEADER)
    if token:
        if not front_end.jwt_secret:
            raise _unauthorized("This front end's key has no signing secret set, so its signed user "
                                "tokens cannot be checked; staff set one on the key's page.")
        claims = _checked_claims(token, front_end.jwt_secret, now)
        return _email(claims.get("email")), str(claims.get("name") or "")[:150]
    if front_end.trusts_plain_headers and headers.get(EMAIL_HEADER):
        return _email(headers[EMAIL_HEADER]), unquote(headers.get(NAME_HEADER, ""))[:150]
    raise _unauthorized(
        "This key belongs to a front end: each request must name its person in a signed "
        "X-OpenWebUI-User-Jwt header (Open WebUI: ENABLE_FORWARD_USER_INFO_HEADERS=true and "
        "FORWARD_USER_INFO_HEADER_JWT_SECRET set to the key's secret)."
    )


def _checked_claims(token: str, secret: str, now: float) -> dict[str, Any]:
    claims = _signed_claims(token, secret)
    _check_times(claims["exp"], claims.get("iat"), now)
    return claims


def _signed_claims(token: str, secret: str) -> dict[str, Any]:
    """The claims of a token signed with ``secret``, its exp a number; its times unchecked."""
    try:
        # Expiry is checked by _check_times against the injectable clock, not PyJWT's own time.time().
        claims: dict[str, Any] = jwt.decode(
            token, secret, algorithms=["HS256"], issuer=ISSUER,
            options={"require": ["exp", "iss", "email"], "verify_exp": False, "verify_iat": False},
        )
    except jwt.InvalidTokenError as exc:
        raise _unauthorized(f"The X-OpenWebUI-User-Jwt token was refused: {_reason(exc)}.") from None
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        raise _unauthorized("The X-OpenWebUI-User-Jwt token was refused: its exp is not a time.")
    return claims


def _check_times(exp: float, iat: object, now: float) -> None:
    if exp <= now:
        raise _unauthorized("The X-OpenWebUI-User-Jwt token has expired.", code="expired_user_token")
    if isinstance(iat, int | float) and not isinstance(iat, bool) and iat > now + CLOCK_SKEW_SECONDS:
        raise _unauthorized("The X-OpenWebUI-User-Jwt token was refused: it was issued in the future.")


def _reason(exc: jwt.InvalidTokenError) -> str:
    if isinstance(exc, jwt.InvalidSignatureError):
        return "its signature does not match this key's secret"
    if isinstance(exc, jwt.InvalidIssuerError):
        return f"its issuer is not {ISSUER!r}"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"it has no {exc.claim!r} claim"
    if isinstance(exc, jwt.InvalidAlgorithmError):
        return "it is not signed with HS256"
    return "it is not a well-formed token"


def _email(value: object) -> str:
    email = value.strip().lower() if isinstance(value, str) else ""
    try:
        validate_email(email)
    except ValidationError:
        raise _unauthorized("The person named by the front end has no valid e-mail address.") from None
    return email


def _unauthorized(message: str, code: str = "invalid_user_token") -> ApiError:
    return ApiError(401, message, code)


@dataclasses.dataclass(frozen=True)
class Person:
    """A person as a front end's key speaks for them; `refusal` set when it may not."""

    person_id: int = 0
    membership_id: int | None = None
    association: str = ""
    share: float = 0.0
    budget_rules: tuple[budget_rules.BudgetRule, ...] = ()
    refusal: ApiError | None = None


@dataclasses.dataclass(frozen=True)
class _SignedToken:
    """What a token whose signature held says, and the secret it held under."""

    secret: str
    email: str
    name: str
    exp: float
    iat: object


@dataclasses.dataclass
class _Spoken:
    """A person as a key speaks for them; ``key`` as it speaks for them, built from ``base`` (the
    key as loaded) on first use."""

    person: Person
    base: KeyInfo | None = None
    key: KeyInfo | None = None


class FrontEndPeople:
    """(front-end key, e-mail) -> the key as it speaks for that person, read through like the key
    cache (read_through.py), and cleared with it when the config epoch changes.

    Signed tokens are remembered too, by (key, token): Open WebUI mints one per request with iat
    in whole seconds, so a person's requests within the same second carry the same token, and its
    signature need not be checked again. Its times are checked against the clock on every use."""

    MAX_ENTRIES = 50_000
    MAX_TOKENS = 10_000

    def __init__(
        self, ttl: float, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
    ) -> None:
        self.wall = wall  # token expiry is wall-clock time
        self._people: ReadThrough[tuple[int, str], _Spoken] = ReadThrough(
            "person a front end speaks for", ttl, clock, self.MAX_ENTRIES)
        self._tokens: dict[tuple[int, str], _SignedToken] = {}

    def clear(self) -> None:
        self._people.clear()
        self._tokens.clear()

    def named_email(self, key_id: int, front_end: FrontEnd, headers: Mapping[str, str]) -> tuple[str, str]:
        """named_email, a token this key's requests sent before not checked twice."""
        token = headers.get(JWT_HEADER)
        if not token or not front_end.jwt_secret:
            return named_email(front_end, headers, self.wall())
        now = self.wall()
        seen = self._tokens.get((key_id, token))
        if seen is None or seen.secret != front_end.jwt_secret:
            claims = _signed_claims(token, front_end.jwt_secret)
            _check_times(claims["exp"], claims.get("iat"), now)
            seen = _SignedToken(front_end.jwt_secret, _email(claims.get("email")), str(claims.get("name") or "")[:150],
                                claims["exp"], claims.get("iat"))
            if len(self._tokens) >= self.MAX_TOKENS:
                self._tokens.clear()
            self._tokens[(key_id, token)] = seen
        else:
            _check_times(seen.exp, seen.iat, now)
        return seen.email, seen.name

    async def speak_for(self, key: KeyInfo, headers: Mapping[str, str]) -> KeyInfo:
        """The key as it speaks for the person its request names; the key itself when it is
        no front end's. ApiError 401 or 403 when it names nobody it may speak for."""
        front_end = key.front_end
        if front_end is None:
            return key
        email, name = self.named_email(key.id, front_end, headers)

        async def find() -> _Spoken:
            return _Spoken(await _find_or_add(key.id, front_end, email, name))

        cached = await self._people.get((key.id, email), find)
        person = cached.person
        if person.refusal is not None:
            raise person.refusal
        if cached.key is None or cached.base is not key:  # the key reloaded: build it again
            cached.base, cached.key = key, dataclasses.replace(
                key, person_id=person.person_id, membership_id=person.membership_id, association=person.association,
                share=person.share, budget_rules=person.budget_rules,
                rate_limits=budget_rules.rate_limits(unit_of(person.person_id, key.tier.name), key.tier)
                + key.own_rate_limits,
            )
        return cached.key


@sync_to_async
def _find_or_add(key_id: int, front_end: FrontEnd, email: str, name: str) -> Person:
    close_old_connections()  # no request cycle closes this thread's connection on the gateway
    try:
        return _person(key_id, front_end, email, name)
    except IntegrityError:  # another gateway added them at the same moment: find theirs
        return _person(key_id, front_end, email, name)


def _person(key_id: int, front_end: FrontEnd, email: str, name: str) -> Person:
    users = list(get_user_model().objects.filter(email__iexact=email).order_by("pk")[:2])
    if len(users) > 1:
        return Person(refusal=ApiError(
            403, f"More than one account has the e-mail {email}; staff must make it unique before a front end "
            "can speak for that person.", "ambiguous_person"))
    if not users and not front_end.adds_people:
        return Person(refusal=ApiError(
            403, f"{email} has no account here, and this front end's key does not add people; ask staff "
            "to add them.", "unknown_person"))
    if front_end.account_id is None:
        return Person(refusal=ApiError(
            403, "This front end's key charges no account, so it cannot speak for anyone; staff set its "
            "account.", "front_end_without_account"))
    with transaction.atomic():
        user = users[0] if users else _add_person(key_id, email, name)
        if user.is_staff or user.is_superuser:
            return Person(refusal=ApiError(
                403, "A front end may not speak for a staff account; staff use keys of their own.",
                "staff_person"))
        if not user.is_active:
            return Person(refusal=ApiError(
                401, "The person this front end named has been deactivated.", "owner_inactive"))
        membership = Membership.objects.filter(user=user, account_id=front_end.account_id).first()
        if membership is None:
            if not front_end.adds_people:
                return Person(refusal=ApiError(
                    403, f"{email} is not a member of this front end's account, and its key does not add "
                    "people; ask staff to add them.", "unknown_person"))
            membership = _add_membership(key_id, user, front_end.account_id)
    key = ApiKey.objects.select_related("membership").get(pk=key_id)
    share = normalised_shares(tree_nodes()).get(f"m{membership.pk}", 0.0)
    return Person(user.pk, membership.pk, association_id(membership.pk), share,
                  budget_rules.rules_for(key, membership.pk))


def _add_person(key_id: int, email: str, name: str) -> Any:
    """A person the front end names for the first time: an account with no password (they use
    the front end, or sign in through the lab's single sign-on)."""
    users = get_user_model()
    username = _free_username(email)
    user = users(username=username, email=email, first_name=name[:150])
    user.set_unusable_password()
    user.save()
    AuditEntry.objects.create(actor_name=f"front end key {key_id}", action="user.create", target=username,
                              detail={"by": "front_end", "key_id": key_id})
    log.info("front-end key %s added person %s", key_id, username)
    return user


def _free_username(email: str) -> str:
    """The e-mail itself (Django allows @ . + - _) when it fits and is free in any case."""
    users = get_user_model()
    base = email[:140]
    candidate, n = base, 1
    while users.objects.filter(username__iexact=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _add_membership(key_id: int, user: Any, account_id: int) -> Membership:
    is_default = not Membership.objects.filter(user=user, is_default=True).exists()
    membership = Membership.objects.create(user=user, account_id=account_id, is_default=is_default)
    AuditEntry.objects.create(actor_name=f"front end key {key_id}", action="membership.add",
                              target=user.get_username(), detail={"by": "front_end", "account_id": account_id})
    return membership  # saving it bumps the config epoch: the account's shares changed (portal/signals.py)
