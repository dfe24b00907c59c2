"""The admin JSON API: keys, users, tiers, replicas, accounts, alerts. Staff session or admin token.

A secret appears in exactly two responses: issuing a key and rotating one.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.utils import timezone
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from ninja.security import APIKeyCookie, HttpBearer
from pydantic import field_validator

from fairness.actions import users as user_actions
from fairness.actions.alerts import acknowledge
from fairness.actions.audit import Actor
from fairness.actions.front_end_keys import FrontEnd, changed, requested
from fairness.actions.keys import checked_limits, issue, revoke, rotate, set_front_end, set_limits
from fairness.actions.replicas import save_replica, set_replica_state
from fairness.actions.tiers import save_tier
from fairness.gateway.api_keys import hash_secret
from fairness.gateway.front_end_secrets import MAX_SECRET_CHARS
from fairness.models import (
    NO_KEY_LIMITS,
    Account,
    AdminToken,
    ApiKey,
    AuditEntry,
    KeyLimits,
    Membership,
    Replica,
    SaturationAlert,
    Tier,
)
from fairness.portal import submit_once
from fairness.portal.api.admin.key_limits import KeyLimitsIn, limits_in, within_tier
from fairness.portal.client_address import client_address
from fairness.portal.reports.queries import KEY_RELATIONS, KeyOut, key_load, key_out, tokens_last_day
from fairness.portal.signed_in import AdminApiRequest

if TYPE_CHECKING:
    from django.contrib.auth import models as auth_models

User = get_user_model()


class StaffSession(APIKeyCookie):
    """A signed-in staff member's session (CSRF-checked on writes)."""

    param_name = "sessionid"

    def authenticate(self, request: HttpRequest, key: str | None) -> auth_models.User | None:
        user = getattr(request, "user", None)
        return user if user is not None and user.is_active and user.is_staff else None


class AdminTokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> auth_models.User | None:
        # usable(): not revoked, not expired, owner still active staff; checked on every request.
        found = AdminToken.objects.usable().select_related("owner").filter(secret_hash=hash_secret(token)).first()
        if found is None:
            return None
        request.user = found.owner
        return found.owner


router = Router(tags=["admin"], auth=[AdminTokenAuth(), StaffSession()])


def actor(request: AdminApiRequest) -> Actor:
    return Actor(request.auth, client_address(request))


def invalid(exc: ValidationError) -> HttpError:
    messages = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
    return HttpError(422, "; ".join(f"{field}: {' '.join(m)}" for field, m in messages.items()))


ModelName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^|\s]+$")]
ALLOWED_MODELS = "Models its keys may use, as clients name them (at most 50); empty for every model."


class Input(Schema):
    """A request body. No NUL character in any text: PostgreSQL cannot store one, so it would
    surface as a server error instead of this 422. (Lone surrogates, which JSON lets through and
    no database can encode, are already refused by the schema's string parsing.)"""

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        texts = value if isinstance(value, list) else [value]
        if any(isinstance(text, str) and "\x00" in text for text in texts):
            raise ValueError("must not contain NUL characters")
        return value


# -- keys ---------------------------------------------------------------------------------------

FrontEndKind = Literal["", "openwebui"]
FRONT_END = "A shared front end the key speaks for (Open WebUI): each request names the person asking."
JWT_SECRET = ("The front end's JWT signing secret (Open WebUI's FORWARD_USER_INFO_HEADER_JWT_SECRET), at least "
              "32 bytes; stored sealed and never shown again.")
TRUSTS_PLAIN_HEADERS = "Also accept the unsigned X-OpenWebUI-User-* headers (anyone with the key can name anyone)."
ADDS_PEOPLE = "Add a person the portal does not know yet on first sight, to the key's account."

class IssuedKey(Schema):
    key: KeyOut
    secret: str = Field(description="Shown once: store it now, it cannot be shown again.")


class KeyIn(Input, KeyLimitsIn):
    owner: str = Field(min_length=1, max_length=150)
    tier: str
    label: str = Field("", max_length=100)
    expires_days: int | None = Field(None, ge=1, le=3650)
    account: str | None = Field(None, max_length=100, description="The account whose share the key charges, "
                                "one its owner is a member of; leave out for the owner's default account.")
    front_end: FrontEndKind = Field("", description=FRONT_END)
    front_end_jwt_secret: str | None = Field(None, max_length=MAX_SECRET_CHARS, description=JWT_SECRET)
    front_end_trusts_plain_headers: bool = Field(False, description=TRUSTS_PLAIN_HEADERS)
    front_end_adds_people: bool = Field(True, description=ADDS_PEOPLE)


class KeyPatch(Input, KeyLimitsIn):
    """Only what is given changes (a limit given as null goes back to the tier's); every gateway
    reloads the key within a second."""

    front_end: FrontEndKind | None = Field(None, description=FRONT_END + " Empty turns it off, secret and all.")
    front_end_jwt_secret: str | None = Field(None, max_length=MAX_SECRET_CHARS,
                                             description=JWT_SECRET + " Leave out to keep the one set.")
    front_end_trusts_plain_headers: bool | None = Field(None, description=TRUSTS_PLAIN_HEADERS)
    front_end_adds_people: bool | None = Field(None, description=ADDS_PEOPLE)


class RotateIn(Input):
    grace_seconds: int = Field(0, ge=0, le=30 * 86400)


@router.get("/keys", response=list[KeyOut], summary="Every key, with live load and the last day's tokens")
def list_keys(request: AdminApiRequest) -> list[KeyOut]:
    load, tokens = key_load(), tokens_last_day()
    keys = ApiKey.objects.select_related(*KEY_RELATIONS)
    return [key_out(k, load, tokens) for k in keys]


IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


@contextmanager
def idempotent(request: AdminApiRequest) -> Iterator[Callable[[str], None]]:
    """Honour an `Idempotency-Key` header: a retry with the same key (say, after a timeout that
    hid the first answer) makes no second key and answers 409 naming the one made."""
    value = request.headers.get("Idempotency-Key")
    if value is None:
        yield lambda made: None
        return
    if not IDEMPOTENCY_KEY.match(value):
        raise HttpError(400, "Idempotency-Key: 1 to 255 visible ASCII characters, no spaces.")
    try:
        # Per caller, so two scripts that pick the same value do not collide.
        with submit_once.first_submission(f"api:{request.auth.pk}:{value}") as record:
            yield record
    except submit_once.Repeated as repeated:
        if not repeated.outcome:
            raise HttpError(409, "A request with this Idempotency-Key is still being handled.") from None
        raise HttpError(409, f"A request with this Idempotency-Key already made key {repeated.outcome}…; "
                             "its secret was in that response only. Rotate the key if it was lost.") from None


RETRY_SAFELY = ("Send an `Idempotency-Key` header to retry safely: a repeat within a day makes nothing new "
                "and answers 409 naming the key the first request made.")


@router.post("/keys", response={201: IssuedKey}, summary="Issue a key (the secret is in this response only)",
             description=RETRY_SAFELY)
def issue_key(request: AdminApiRequest, data: KeyIn) -> Status[IssuedKey]:
    owner = User.objects.filter(username=data.owner).first()
    if owner is None:
        raise HttpError(422, f"owner: no user named {data.owner!r}")
    tier = Tier.objects.filter(name=data.tier).first()
    if tier is None:
        raise HttpError(422, f"tier: no tier named {data.tier!r}")
    expires = timezone.now() + dt.timedelta(days=data.expires_days) if data.expires_days else None
    if not owner.is_active:  # checked before the idempotency record: a refusal makes nothing to name
        raise HttpError(422, f"owner: {data.owner!r} is deactivated; keys are for active users only")
    membership = named_membership(owner, data.account) if data.account is not None else None
    front_end = checked_front_end(lambda: requested(data.front_end, data.front_end_jwt_secret,
                                                    data.front_end_trusts_plain_headers, data.front_end_adds_people))
    limits = within_tier(lambda: checked_limits(limits_in(data) or NO_KEY_LIMITS, tier))
    with idempotent(request) as record:
        key, secret = issue(actor(request), owner, tier, data.label, expires, membership, front_end, limits)
        record(key.prefix)
    return Status(201, IssuedKey(key=key_out(key), secret=secret))


def named_membership(owner: auth_models.User, account: str) -> Membership:
    membership = Membership.objects.select_related("account").filter(user=owner, account__name=account).first()
    if membership is not None:
        return membership
    if not Account.objects.filter(name=account).exists():
        raise HttpError(422, f"account: no account named {account!r}")
    raise HttpError(400, f"account: {owner.get_username()!r} is not a member of {account!r}; "
                         f"add them with POST /api/admin/accounts/{account}/members first")


def checked_front_end(make: Callable[[], FrontEnd]) -> FrontEnd:
    try:
        return make()
    except ValidationError as exc:  # named as this API names the fields
        named = {f if f.startswith("front_end") else f"front_end_{f}": m for f, m in exc.message_dict.items()}
        raise invalid(ValidationError(named)) from None


@router.patch("/keys/{prefix}", response=KeyOut,
              summary="Change whether a key is a front end's, and how; and its own limits, within its tier")
def update_key(request: AdminApiRequest, prefix: str, data: KeyPatch) -> KeyOut:
    key = get_object_or_404(ApiKey.objects.select_related(*KEY_RELATIONS),
                            prefix=prefix)
    if key.revoked_at is not None:
        raise HttpError(409, "This key is revoked; issue a new one instead.")
    front_end = checked_front_end(lambda: changed(FrontEnd.of(key), data.front_end, data.front_end_jwt_secret,
                                                  data.front_end_trusts_plain_headers, data.front_end_adds_people))
    limits = limits_in(data, KeyLimits.of(key))
    if limits is not None:
        within_tier(lambda: set_limits(actor(request), key, limits))
    if limits is None or data.model_fields_set - set(KeyLimits.FIELDS):  # a body of limits alone leaves the rest
        set_front_end(actor(request), key, front_end)
    return key_out(key)


@router.post("/keys/{prefix}/revoke", response=KeyOut, summary="Revoke a key (every gateway within a second)")
def revoke_key(request: AdminApiRequest, prefix: str) -> KeyOut:
    return key_out(revoke(actor(request), get_object_or_404(ApiKey, prefix=prefix)))


@router.post("/keys/{prefix}/rotate", response=IssuedKey, summary="A new secret; the old one ends after the grace",
             description=RETRY_SAFELY)
def rotate_key(request: AdminApiRequest, prefix: str, data: RotateIn) -> IssuedKey:
    old = get_object_or_404(ApiKey, prefix=prefix)
    with idempotent(request) as record:  # first: a retried rotation without grace finds its key revoked
        if old.revoked_at is not None:
            raise HttpError(409, "This key is revoked; issue a new one instead.")
        new, secret = rotate(actor(request), old, data.grace_seconds)
        record(new.prefix)
    return IssuedKey(key=key_out(new), secret=secret)


# -- users --------------------------------------------------------------------------------------

class UserOut(Schema):
    username: str
    email: str
    is_staff: bool
    is_active: bool
    keys: int


class UserIn(Input):
    username: str = Field(min_length=1, max_length=150, pattern=r"^[\w.@+-]+$")
    email: str = Field("", max_length=254)
    is_staff: bool = False
    password: str | None = Field(None, min_length=8, max_length=128)


class UserTierIn(Input):
    tier: str


def user_out(user: auth_models.User) -> UserOut:
    return UserOut(username=user.username, email=user.email, is_staff=user.is_staff, is_active=user.is_active,
                   keys=user.api_keys.filter(revoked_at=None).count())


@router.get("/users", response=list[UserOut])
def list_users(request: AdminApiRequest) -> list[UserOut]:
    return [user_out(u) for u in User.objects.order_by("username")]


@router.post("/users", response={201: UserOut})
def create_user(request: AdminApiRequest, data: UserIn) -> Status[UserOut]:
    if User.objects.filter(username__iexact=data.username).exists():
        raise HttpError(409, f"username: {data.username!r} is taken")
    user = user_actions.create_user(actor(request), data.username, data.email, data.is_staff, data.password)
    return Status(201, user_out(user))


@router.post("/users/{username}/tier", response=UserOut, summary="Move every live key of the user to a tier")
def set_user_tier(request: AdminApiRequest, username: str, data: UserTierIn) -> UserOut:
    user = get_object_or_404(User, username=username)
    tier = Tier.objects.filter(name=data.tier).first()
    if tier is None:
        raise HttpError(422, f"tier: no tier named {data.tier!r}")
    user_actions.set_user_tier(actor(request), user, tier)
    return user_out(user)


# -- tiers --------------------------------------------------------------------------------------

PER_PERSON_LIMIT = "A minute's limit for each person (their keys together); null for none."
TIER_LIMIT = "A minute's limit for all the tier's keys together; null for none."
RateLimitName = Literal["key_requests_per_minute", "key_tokens_per_minute", "requests_per_minute", "tokens_per_minute"]


class TierSchema(Input):
    name: str = Field(min_length=1, max_length=40, pattern=r"^[-a-zA-Z0-9_]+$")
    description: str = Field("", max_length=200)
    per_key_concurrency: int = Field(2, ge=1, le=10_000)
    pool_concurrency: int | None = Field(None, ge=1, le=100_000)
    head_start_seconds: float = Field(0.0, ge=0, le=86_400 * 7)
    max_queue_wait_seconds: float = Field(300.0, ge=0, le=86_400)
    max_queued_per_key: int = Field(64, ge=1, le=100_000)
    max_queued: int | None = Field(None, ge=1, le=100_000, description="Requests waiting across all its "
                                   "keys; null for no tier bound (GP_MAX_QUEUED_TOTAL still applies).")
    engine_priority: int = Field(0, ge=-1_000_000, le=1_000_000)
    borrow_idle_slots: bool = False
    queue_events: bool = Field(True, description="A streamed request that waits is told its place in line "
                               "every second (SSE comments); false: plain 429s, no byte before its answer.")
    fairshare_weight_seconds: float = Field(300.0, ge=0, le=86_400, description="Fair share: how many seconds "
                                            "of waiting an account over its share gives up; 0 turns it off.")
    key_requests_per_minute: int | None = Field(None, ge=1, le=10_000_000, description=PER_PERSON_LIMIT)
    key_tokens_per_minute: int | None = Field(None, ge=1, le=10_000_000_000, description=PER_PERSON_LIMIT)
    requests_per_minute: int | None = Field(None, ge=1, le=10_000_000, description=TIER_LIMIT)
    tokens_per_minute: int | None = Field(None, ge=1, le=10_000_000_000, description=TIER_LIMIT)
    isolate_prefix_cache: bool = Field(
        True, description="Send each user's requests with a cache salt of their own (vLLM's cache_salt): "
        "no prefix-cache sharing, and no timing of others' prompts, across the tier's users.",
    )
    allowed_models: list[ModelName] = Field(default_factory=list, description=ALLOWED_MODELS)
    self_service_keys: bool = Field(True, description="Its users make and rotate their own keys on /me/keys/ "
                                                      "(anyone may revoke their own).")
    max_key_days: int | None = Field(None, ge=1, le=3650, description="The longest a key its users make may live; "
                                     "null for no limit.")


class TierPatch(Input):
    description: str | None = Field(None, max_length=200)
    per_key_concurrency: int | None = Field(None, ge=1, le=10_000)
    pool_concurrency: int | None = Field(None, ge=1, le=100_000)
    clear_pool: bool = False
    head_start_seconds: float | None = Field(None, ge=0, le=86_400 * 7)
    max_queue_wait_seconds: float | None = Field(None, ge=0, le=86_400)
    max_queued_per_key: int | None = Field(None, ge=1, le=100_000)
    max_queued: int | None = Field(None, ge=1, le=100_000)
    clear_max_queued: bool = False
    engine_priority: int | None = Field(None, ge=-1_000_000, le=1_000_000)
    borrow_idle_slots: bool | None = None
    queue_events: bool | None = None
    fairshare_weight_seconds: float | None = Field(None, ge=0, le=86_400)
    key_requests_per_minute: int | None = Field(None, ge=1, le=10_000_000)
    key_tokens_per_minute: int | None = Field(None, ge=1, le=10_000_000_000)
    requests_per_minute: int | None = Field(None, ge=1, le=10_000_000)
    tokens_per_minute: int | None = Field(None, ge=1, le=10_000_000_000)
    clear_rate_limits: list[RateLimitName] = Field(default_factory=list, description="Rate limits to remove.")
    isolate_prefix_cache: bool | None = None
    allowed_models: list[ModelName] | None = Field(None, description=ALLOWED_MODELS)
    self_service_keys: bool | None = None
    max_key_days: int | None = Field(None, ge=1, le=3650)
    clear_max_key_days: bool = False


def tier_out(tier: Tier) -> TierSchema:
    return TierSchema(**{f: getattr(tier, f) for f in TierSchema.model_fields})


def validated_tier_save(request: AdminApiRequest, tier: Tier, changed: dict[str, Any]) -> Tier:
    try:
        tier.full_clean()
    except ValidationError as exc:
        raise invalid(exc) from None
    return save_tier(actor(request), tier, changed)


@router.get("/tiers", response=list[TierSchema])
def list_tiers(request: AdminApiRequest) -> list[TierSchema]:
    return [tier_out(t) for t in Tier.objects.all()]


@router.post("/tiers", response={201: TierSchema})
def create_tier(request: AdminApiRequest, data: TierSchema) -> Status[TierSchema]:
    if Tier.objects.filter(name=data.name).exists():
        raise HttpError(409, f"name: a tier named {data.name!r} exists")
    return Status(201, tier_out(validated_tier_save(request, Tier(**data.dict()), data.dict())))


@router.patch("/tiers/{name}", response=TierSchema, summary="Edit a tier; new requests follow at once")
def update_tier(request: AdminApiRequest, name: str, data: TierPatch) -> TierSchema:
    tier = get_object_or_404(Tier, name=name)
    clears = {"clear_pool": "pool_concurrency", "clear_max_key_days": "max_key_days", "clear_max_queued": "max_queued"}
    changed = {k: v for k, v in data.dict(exclude_unset=True).items()
               if k not in clears and k != "clear_rate_limits" and v is not None}
    for field, value in changed.items():
        setattr(tier, field, value)
    for flag, field in clears.items():
        if getattr(data, flag):
            setattr(tier, field, None)
            changed[field] = None
    for field in data.clear_rate_limits:
        setattr(tier, field, None)
        changed[field] = None
    return tier_out(validated_tier_save(request, tier, changed))


# -- replicas -----------------------------------------------------------------------------------

GPU_EXPORTER = "Its GPU's DCGM exporter, e.g. http://10.0.0.5:9400/metrics; empty for none."


class ReplicaIn(Input):
    name: str = Field(min_length=1, max_length=60, pattern=r"^[-a-zA-Z0-9_]+$")
    base_url: str = Field(max_length=200)
    model: str = Field(min_length=1, max_length=200)
    engine_kind: Literal["vllm", "llamacpp", "sglang", "tgi"] = "vllm"
    model_kind: Literal["chat", "embedding"] = "chat"
    max_num_seqs: int = Field(8, ge=1, le=100_000)
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    api_key: str = Field("", max_length=200)
    gpu_metrics_url: str = Field("", max_length=200, description=GPU_EXPORTER)
    tiers: list[str] = Field(default_factory=list, description="Tier names; empty serves every tier.")


class ReplicaPatch(Input):
    gpu_metrics_url: str = Field(max_length=200, description=GPU_EXPORTER)


class ReplicaOut(Schema):
    name: str
    base_url: str
    model: str
    engine_kind: str
    model_kind: str
    max_num_seqs: int
    scheduling_policy: str
    enabled: bool
    draining: bool
    gpu_metrics_url: str
    tiers: list[str]


def replica_out(replica: Replica) -> ReplicaOut:
    return ReplicaOut(
        tiers=sorted(t.name for t in replica.tiers.all()),
        **{f: getattr(replica, f) for f in ReplicaOut.model_fields if f != "tiers"},
    )


@router.get("/replicas", response=list[ReplicaOut])
def list_replicas(request: AdminApiRequest) -> list[ReplicaOut]:
    return [replica_out(r) for r in Replica.objects.prefetch_related("tiers")]


@router.post("/replicas", response={201: ReplicaOut})
def add_replica(request: AdminApiRequest, data: ReplicaIn) -> Status[ReplicaOut]:
    if Replica.objects.filter(name=data.name).exists():
        raise HttpError(409, f"name: a replica named {data.name!r} exists")
    tiers = list(Tier.objects.filter(name__in=data.tiers))
    if len(tiers) != len(set(data.tiers)):
        raise HttpError(422, "tiers: unknown tier name")
    fields = data.dict(exclude={"tiers"})
    replica = Replica(**fields)
    try:
        replica.full_clean()
        save_replica(actor(request), replica, fields, tiers)  # refuses overlapping deployments
    except ValidationError as exc:
        raise invalid(exc) from None
    return Status(201, replica_out(replica))


@router.patch("/replicas/{name}", response=ReplicaOut, summary="Name (or clear) a replica's GPU exporter")
def update_replica(request: AdminApiRequest, name: str, data: ReplicaPatch) -> ReplicaOut:
    replica = get_object_or_404(Replica.objects.prefetch_related("tiers"), name=name)
    replica.gpu_metrics_url = data.gpu_metrics_url
    try:
        replica.full_clean()
        save_replica(actor(request), replica, {"gpu_metrics_url": data.gpu_metrics_url})
    except ValidationError as exc:
        raise invalid(exc) from None
    return replica_out(replica)


@router.post("/replicas/{name}/{state}", response=ReplicaOut, summary="enable, disable, or drain a replica")
def replica_state(request: AdminApiRequest, name: str, state: Literal["enable", "disable", "drain"]) -> ReplicaOut:
    replica = get_object_or_404(Replica, name=name)
    try:
        return replica_out(set_replica_state(actor(request), replica, state))
    except ValidationError as exc:
        raise HttpError(409, " ".join(exc.messages)) from None


# -- alerts and audit ---------------------------------------------------------------------------

class AlertOut(Schema):
    id: int
    model: str
    kind: str
    opened_at: dt.datetime
    resolved_at: dt.datetime | None
    acknowledged_at: dt.datetime | None
    figures: dict[Any, Any]


@router.get("/alerts", response=list[AlertOut])
def list_alerts(request: AdminApiRequest) -> list[SaturationAlert]:
    return list(SaturationAlert.objects.all()[:200])


@router.post("/alerts/{alert_id}/acknowledge", response=AlertOut)
def acknowledge_alert(request: AdminApiRequest, alert_id: int) -> SaturationAlert:
    return acknowledge(actor(request), get_object_or_404(SaturationAlert, pk=alert_id))


class AuditOut(Schema):
    at: dt.datetime
    actor_name: str
    action: str
    target: str
    detail: dict[Any, Any]
    ip: str | None


@router.get("/audit", response=list[AuditOut])
def list_audit(request: AdminApiRequest, limit: int = 100) -> list[AuditEntry]:
    return list(AuditEntry.objects.all()[: max(1, min(limit, 1000))])
