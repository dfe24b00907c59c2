"""What the pages and the admin API read beyond plain rows: live load, recent tokens, the keys
page's search and sort, the staff home's list of what needs attention."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import F, OuterRef, Q, QuerySet, Subquery, Sum
from django.utils import timezone
from ninja import Field, Schema

from fairness.accounting.key_expiry import session_key_prefixes
from fairness.models import ApiKey, AuditEntry, EngineSample, KeyLimits, Replica, SaturationAlert, UsageHourly
from fairness.scheduling import health, live_counts
from fairness.scheduling.live_counts import KeyStats
from fairness.store import keyspace
from fairness.store.redis_clients import redis_sync

# (person id, tier) -> (in flight, queued): admission counts a person's keys of a tier together.
Load = dict[tuple[int, str], tuple[int, int]]


def key_load() -> Load:
    """What each person runs and has waiting, per tier, from admission's live counts; a key's row
    shows its owner's figures in its tier (its caps are theirs, across their keys)."""
    return live_counts.person_load(redis_sync())


def load_of_key(key: ApiKey, load: Load) -> tuple[int, int]:
    return load.get((key.owner_id, key.tier.name), (0, 0))


# What key_out reads of a key besides its own row: select_related(*KEY_RELATIONS) fetches it at once.
KEY_RELATIONS = ("owner", "tier", "membership__account", "created_by", "replaced_by")


class KeyOut(Schema):
    prefix: str
    owner: str
    tier: str
    label: str
    created_at: dt.datetime
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None
    last_used_at: dt.datetime | None
    in_flight: int = 0
    queued: int = 0
    tokens_24h: int = 0
    account: str | None = Field(
        None, description="The account whose share its requests charge; null: its owner's default account."
    )
    created_by: str | None = Field(
        None, description="Who made it: a staff member, its owner on their own page, or who ran the command "
        "(\"os:root\"); null: made before this was recorded."
    )
    replaced_by: str | None = Field(None, description="The prefix of the key a rotation made in its place.")
    front_end: str = Field("", description="The shared front end it speaks for (\"openwebui\"): each request "
                           "names the person asking. Empty: the key speaks for its owner.")
    front_end_trusts_plain_headers: bool = Field(False, description="It also accepts the front end's unsigned "
                                                 "user headers.")
    front_end_adds_people: bool = Field(True, description="A person the portal does not know yet is added "
                                        "on first sight.")
    max_concurrent: int | None = Field(None, description="Its own cap on requests at once, below its tier's; "
                                       "null: the tier's.")
    requests_per_minute: int | None = Field(None, description="Its own requests a minute, below its tier's; "
                                            "null: the tier's.")
    tokens_per_minute: int | None = Field(None, description="Its own weighted tokens a minute, below its "
                                          "tier's; null: the tier's.")
    allowed_models: list[str] = Field([], description="The only models it may use, among its tier's; empty: "
                                      "every model its tier allows.")


def key_out(
    key: ApiKey, load: Load | None = None, tokens: dict[int, int] | None = None
) -> KeyOut:
    in_flight, queued = load_of_key(key, load or {})
    return KeyOut(
        prefix=key.prefix, owner=key.owner.get_username(), tier=key.tier.name, label=key.label,
        created_at=key.created_at, expires_at=key.expires_at, revoked_at=key.revoked_at,
        last_used_at=key.last_used_at, in_flight=in_flight, queued=queued, tokens_24h=(tokens or {}).get(key.pk, 0),
        account=key.membership.account.name if key.membership else None,
        created_by=key.created_by.get_username() if key.created_by else (key.made_by_command or None),
        replaced_by=key.replaced_by.prefix if key.replaced_by else None,
        front_end=key.front_end, front_end_trusts_plain_headers=key.front_end_trusts_plain_headers,
        front_end_adds_people=key.front_end_adds_people, **KeyLimits.of(key).fields(),
    )


def tokens_last_day() -> dict[int, int]:
    since = timezone.now() - dt.timedelta(hours=24)
    rows = UsageHourly.objects.filter(hour__gte=since).values("key").annotate(
        p=Sum("prompt_tokens"), c=Sum("completion_tokens")
    )
    return {row["key"]: (row["p"] or 0) + (row["c"] or 0) for row in rows}


# -- the staff keys page: search, filter, sort, page --------------------------------------------

KEY_STATES = ("live", "ending", "expired", "revoked", "all")
# Sortable columns: the page's name -> the database's order, or None for the live figures, which
# only Redis knows (those sort in Python, over every matching key).
KEY_SORTS: dict[str, str | None] = {
    "key": "prefix", "owner": "owner__username", "tier": "tier__name", "created": "created_at",
    "expires": "expires_at", "last_used": "last_used_at", "in_flight": None, "queued": None, "tokens": None,
}
DEFAULT_KEY_SORT = "-created"


@dataclass(frozen=True)
class KeyRow:
    key: KeyOut
    state: str  # live, ending (a rotated key in its grace period), expired or revoked
    ends_in: str = ""  # for an ending key: "ends in 1 h"
    narrowed: tuple[str, ...] = ()  # its own limits where they hold it below its tier, in words


def rotated_prefixes() -> QuerySet[AuditEntry, str]:
    """Keys that were rotated: one not revoked is in its grace period until it expires (a
    rotation without grace revokes the old key at once)."""
    return AuditEntry.objects.filter(action="key.rotate").values_list("target", flat=True)


def ends_in(moment: dt.datetime, now: dt.datetime) -> str:
    """"ends in 1 h" for a grace of an hour just begun: to the minute, since a grace is short."""
    minutes = max(1, math.ceil((moment - now).total_seconds() / 60))
    if minutes < 60:
        return f"ends in {minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours >= 48:
        return f"ends in {round(minutes / 1440)} d"
    return f"ends in {hours} h" + (f" {rest} min" if rest else "")


def keys_matching(search: str, tier: str, state: str, now: dt.datetime) -> QuerySet[ApiKey]:
    """The keys page's rows before sorting: `search` is part of an owner, a label or a prefix."""
    keys = ApiKey.objects.select_related(*KEY_RELATIONS)
    if search:
        keys = keys.filter(Q(owner__username__icontains=search) | Q(label__icontains=search)
                           | Q(prefix__icontains=search))
    if tier:
        keys = keys.filter(tier__name=tier)
    unexpired = Q(expires_at=None) | Q(expires_at__gt=now)
    if state in ("live", "ending"):
        keys = keys.filter(unexpired, revoked_at=None)
        if state == "ending":
            keys = keys.filter(prefix__in=rotated_prefixes())
    elif state == "expired":
        keys = keys.filter(revoked_at=None, expires_at__lte=now)
    elif state == "revoked":
        keys = keys.exclude(revoked_at=None)
    return keys


def key_rows(keys: Iterable[ApiKey], now: dt.datetime, load: Load,
             tokens: dict[int, int]) -> list[KeyRow]:
    keys = list(keys)
    rotated = set(rotated_prefixes().filter(target__in=[k.prefix for k in keys]))
    rows = []
    for key in keys:
        out = key_out(key, load, tokens)
        narrowed = tuple(KeyLimits.of(key).narrowed(key.tier))
        if key.revoked_at is not None:
            rows.append(KeyRow(out, "revoked", narrowed=narrowed))
        elif key.is_expired(now):
            rows.append(KeyRow(out, "expired", narrowed=narrowed))
        elif key.prefix in rotated and key.expires_at is not None:
            rows.append(KeyRow(out, "ending", ends_in(key.expires_at, now), narrowed))
        else:
            rows.append(KeyRow(out, "live", narrowed=narrowed))
    return rows


def sorted_key_rows(keys: QuerySet[ApiKey], sort: str, now: dt.datetime) -> tuple[list[KeyRow] | None,
                                                                                  QuerySet[ApiKey]]:
    """Sorted by a database column: (None, the ordered queryset) to be paged before rows are
    built; by a live figure: (every row, sorted), the queryset unused."""
    column = sort.lstrip("-")
    descending = sort.startswith("-")
    field = KEY_SORTS[column]
    if field is not None:
        order = F(field).desc(nulls_last=True) if descending else F(field).asc(nulls_last=True)
        return None, keys.order_by(order, "-pk")
    rows = key_rows(keys, now, key_load(), tokens_last_day())

    def figure(row: KeyRow) -> int:
        return {"in_flight": row.key.in_flight, "queued": row.key.queued, "tokens": row.key.tokens_24h}[column]

    return sorted(rows, key=figure, reverse=descending), keys


def load_of(prefixes: list[str]) -> dict[str, KeyStats]:
    """In flight and queued of the keys a page shows, for its live refresh."""
    load = key_load()
    figures = {prefix: load.get((owner, tier), (0, 0)) for prefix, owner, tier
               in ApiKey.objects.filter(prefix__in=prefixes).values_list("prefix", "owner_id", "tier__name")}
    return {prefix: {"in_flight": running, "queued": waiting} for prefix, (running, waiting) in figures.items()}


def tokens_by_person(days: int = 30) -> dict[int, int]:
    """User id -> prompt plus completion tokens over the last `days` days, for the users page."""
    since = timezone.now() - dt.timedelta(days=days)
    rows = UsageHourly.objects.filter(hour__gte=since).values("person").annotate(
        p=Sum("prompt_tokens"), c=Sum("completion_tokens")
    )
    return {row["person"]: (row["p"] or 0) + (row["c"] or 0) for row in rows}


def last_samples(replica_ids: Iterable[int]) -> dict[int, EngineSample]:
    """Each replica's latest stored sample: what a disabled replica (no longer polled, so gone
    from the latest readings) last looked like."""
    latest = (EngineSample.objects.filter(replica_id=OuterRef("replica_id"))
              .order_by("-taken_at").values("pk")[:1])
    samples = EngineSample.objects.filter(replica_id__in=list(replica_ids), pk=Subquery(latest))
    return {sample.replica_id: sample for sample in samples}


# -- the staff home: what needs attention now ---------------------------------------------------

EXPIRING_WITHIN = dt.timedelta(days=7)


@dataclass(frozen=True)
class DownReplica:
    replica: Replica
    why: str


@dataclass(frozen=True)
class LongestQueue:
    tier: str
    queued: int
    longest_wait: float  # seconds the oldest of them has waited


@dataclass(frozen=True)
class Attention:
    open_alerts: list[SaturationAlert]
    replicas_down: list[DownReplica]
    expiring: list[KeyRow]
    longest_queue: LongestQueue | None

    @property
    def calm(self) -> bool:
        return not (self.open_alerts or self.replicas_down or self.expiring or self.longest_queue)


def replicas_down(readings: dict[str, dict[str, Any]]) -> list[DownReplica]:
    """Enabled replicas the gateways route around (their shared health verdict says down) or
    whose last poll failed; `readings` are polling.latest_readings() by name."""
    enabled = list(Replica.objects.filter(enabled=True))
    if not enabled:
        return []
    verdicts = redis_sync().mget([keyspace.health_verdict(r.name, r.base_url) for r in enabled])
    down = []
    for replica, verdict in zip(enabled, verdicts, strict=True):
        reading = readings.get(replica.name)
        why = []
        if verdict in health.NOT_HEALTHY:
            why.append("the gateways route around it: " + (
                "it failed its health checks" if verdict in (health.DOWN, health.DOWN.decode())
                else "requests of several callers failed or timed out there"))
        if reading is not None and not reading["healthy"]:
            why.append(f"its last poll failed: {reading['error'] or 'no answer'}")
        if why:
            down.append(DownReplica(replica, "; ".join(why)))
    return down


def longest_queue(stats: live_counts.Stats) -> LongestQueue | None:
    waiting = [(name, tier) for name, tier in stats["tiers"].items() if tier["queued"] > 0]
    if not waiting:
        return None
    name, tier = max(waiting, key=lambda item: (item[1]["longest_wait"], item[1]["queued"]))
    return LongestQueue(name, tier["queued"], tier["longest_wait"])


def attention(now: dt.datetime, readings: dict[str, dict[str, Any]], stats: live_counts.Stats) -> Attention:
    expiring = ApiKey.objects.select_related(*KEY_RELATIONS).filter(
        revoked_at=None, expires_at__gt=now, expires_at__lte=now + EXPIRING_WITHIN
    ).exclude(prefix__in=session_key_prefixes()).order_by("expires_at")  # the playground's end with their session
    return Attention(
        open_alerts=list(SaturationAlert.objects.filter(resolved_at=None).select_related("acknowledged_by")),
        replicas_down=replicas_down(readings),
        expiring=key_rows(expiring, now, {}, {}),
        longest_queue=longest_queue(stats),
    )
