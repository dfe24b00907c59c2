"""What the pages and the admin API read beyond plain rows: live load and recent tokens."""

from __future__ import annotations

import datetime as dt

from django.db.models import Sum
from django.utils import timezone
from ninja import Schema

from fairness.models import ApiKey, UsageHourly
from fairness.scheduling import live_counts
from fairness.store.redis_clients import redis_sync


def key_load() -> dict[int, tuple[int, int]]:
    """Key id -> (in flight, queued), from admission's live counts."""
    return live_counts.key_load(redis_sync())


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



def key_out(
    key: ApiKey, load: dict[int, tuple[int, int]] | None = None, tokens: dict[int, int] | None = None
) -> KeyOut:
    in_flight, queued = (load or {}).get(key.pk, (0, 0))
    return KeyOut(
        prefix=key.prefix, owner=key.owner.get_username(), tier=key.tier.name, label=key.label,
        created_at=key.created_at, expires_at=key.expires_at, revoked_at=key.revoked_at,
        last_used_at=key.last_used_at, in_flight=in_flight, queued=queued, tokens_24h=(tokens or {}).get(key.pk, 0),
    )


def tokens_last_day() -> dict[int, int]:
    since = timezone.now() - dt.timedelta(hours=24)
    rows = UsageHourly.objects.filter(hour__gte=since).values("key").annotate(
        p=Sum("prompt_tokens"), c=Sum("completion_tokens")
    )
    return {row["key"]: (row["p"] or 0) + (row["c"] or 0) for row in rows}
