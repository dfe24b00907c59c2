"""API keys on the request path: the bearer header, the hash, and the cached lookup.

Minting lives with the portal (actions/keys.py)."""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from fairness.gateway import budget_rules, database_outage, front_end_secrets, key_limits
from fairness.gateway.associations import association_of, charged_membership
from fairness.gateway.budget_rules import BudgetRule
from fairness.gateway.errors import ApiError
from fairness.gateway.model_access import EVERY_MODEL, ModelAccess, model_access_of
from fairness.gateway.read_through import ReadThrough
from fairness.gateway.tier_policy import TierPolicy
from fairness.models import ApiKey, KeyLimits, Membership
from fairness.scheduling.limits import RateLimit
from fairness.scheduling.units import unit_of

log = logging.getLogger(__name__)

SECRET_PREFIX = "gp-"
VISIBLE_CHARS = 11  # "gp-" and 8 characters: enough to tell keys apart, useless to an attacker


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class KeyInfo:
    """What the request path needs to know about a key, detached from the ORM."""

    id: int
    prefix: str
    owner_id: int
    tier: TierPolicy  # the tier's, with the key's own cap at once where that is lower (key_limits.py)
    expires_at: float | None
    revoked: bool
    owner_active: bool  # a deactivated user's keys stop with them
    association: str = ""  # whose share its work counts against ("" for none)
    share: float = 0.0  # that association's normalised share S
    budget_rules: tuple[BudgetRule, ...] = ()
    rate_limits: tuple[RateLimit, ...] = ()  # the tier's, for its person, then the key's own
    own_rate_limits: tuple[RateLimit, ...] = ()  # the key's own alone: whoever a front end names
    model_access: ModelAccess = EVERY_MODEL  # what its own list, its tier and its accounts let it use
    # Whom its requests count as (caps, queue bounds, rate limits, usage rows): its owner, or for
    # a front end's key, the person a request names (front_end_people.speak_for replaces these).
    person_id: int = 0
    membership_id: int | None = None  # the association charged, as a Membership pk
    front_end: FrontEnd | None = None  # set on a key that speaks for many people

    @property
    def unit(self) -> str:
        """What admission's caps count: this person in this tier."""
        return unit_of(self.person_id, self.tier.name)


@dataclass(frozen=True)
class FrontEnd:
    """How a front end's key names the person asking (fairness/gateway/front_end_people.py)."""

    kind: str  # "openwebui"
    jwt_secret: str  # "" when it signs nothing (it may then only use the plain headers)
    trusts_plain_headers: bool
    adds_people: bool
    account_id: int | None  # where people it names for the first time become members


Loader = Callable[[str], Awaitable[KeyInfo | None]]  # secret hash → the key, None if unknown


def parse_bearer(header: str | None) -> str:
    if not header:
        raise ApiError(
            401,
            "Missing API key. Send it as 'Authorization: Bearer gp-...'.",
            "missing_api_key",
        )
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret.startswith(SECRET_PREFIX) or len(secret) < 20:
        raise ApiError(
            401,
            "Malformed API key. Expected 'Authorization: Bearer gp-...'.",
            "invalid_api_key",
        )
    return secret


@sync_to_async
def _load(secret_hash: str) -> KeyInfo | None:
    return _key_info(secret_hash=secret_hash)


@sync_to_async
def load_by_id(key_id: int) -> KeyInfo | None:
    """The key with this id, as a request with its secret would see it (the batch runner acts
    as the key that created a batch, without its secret)."""
    return _key_info(pk=key_id)


def _key_info(**match: object) -> KeyInfo | None:
    # No request cycle closes this thread's connection on the gateway: check it here.
    close_old_connections()
    key = ApiKey.objects.select_related("tier", "owner", "membership").filter(**match).first()
    if key is None:
        return None
    association, share = association_of(key)
    membership = int(association) if association else None
    limits = KeyLimits.of(key)
    policy = key_limits.narrowed(TierPolicy.of(key.tier), limits)
    own_rates = key_limits.own_rate_limits(key.pk, limits, policy)
    return KeyInfo(
        id=key.pk,
        prefix=key.prefix,
        owner_id=key.owner_id,
        tier=policy,
        expires_at=key.expires_at.timestamp() if key.expires_at else None,
        revoked=key.revoked_at is not None,
        owner_active=key.owner.is_active,
        association=association,
        share=share,
        model_access=model_access_of(key),
        budget_rules=budget_rules.rules_for(key, membership),
        rate_limits=budget_rules.rate_limits(unit_of(key.owner_id, policy.name), policy) + own_rates,
        own_rate_limits=own_rates,
        person_id=key.owner_id,
        membership_id=membership,
        front_end=_front_end_of(key) if key.front_end else None,
    )


def _front_end_of(key: ApiKey) -> FrontEnd:
    try:
        secret = front_end_secrets.unseal(key.front_end_secret) if key.front_end_secret else ""
    except front_end_secrets.SecretUnreadable:
        # Sealed under another SECRET_KEY: no token can be checked, so none is accepted.
        log.error("the front-end secret of key %s cannot be read (SECRET_KEY changed?)", key.prefix)
        secret = ""
    membership = charged_membership(key)
    account = None
    if membership is not None:
        account = Membership.objects.filter(pk=membership).values_list("account_id", flat=True).first()
    return FrontEnd(key.front_end, secret, key.front_end_trusts_plain_headers, key.front_end_adds_people, account)


class KeyCache:
    """Secret hash → KeyInfo (or None for unknown keys), read through (read_through.py): kept
    until the config epoch changes, and read again in the background after `ttl`."""

    def __init__(
        self, ttl: float, clock: Callable[[], float] = time.monotonic, loader: Loader = _load
    ) -> None:
        self.loader = loader
        self._cache: ReadThrough[str, KeyInfo | None] = ReadThrough("key", ttl, clock)

    @property
    def lookups_under_way(self) -> int:
        return self._cache.lookups_under_way

    def clear(self) -> None:
        self._cache.clear()

    async def authenticate(self, authorization: str | None) -> KeyInfo:
        secret_hash = hash_secret(parse_bearer(authorization))
        try:
            info = await self._cache.get(secret_hash, functools.partial(self.loader, secret_hash))
        except database_outage.DATABASE_ERRORS as exc:
            # Only a key not read before the database went away gets here: the cache answers the rest
            # (the failure was logged where the lookup ran, read_through.py).
            raise database_outage.unavailable(database_outage.KEY_UNCHECKED) from exc
        if info is None:
            raise ApiError(401, "Invalid API key.", "invalid_api_key")
        check_usable(info)
        return info


def check_usable(info: KeyInfo) -> None:
    """ApiError 401 when the key may not be used now: revoked, its owner deactivated, expired."""
    if info.revoked:
        raise ApiError(401, "This API key has been revoked.", "revoked_api_key")
    if not info.owner_active:
        raise ApiError(401, "The owner of this API key has been deactivated.", "owner_inactive")
    if info.expires_at is not None and info.expires_at <= time.time():
        raise ApiError(401, "This API key has expired.", "expired_api_key")
