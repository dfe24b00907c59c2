"""Fair-share usage between Redis (live, charged by the gateways) and the database (its copy).

Every GP_FAIRSHARE_SAVE_SECONDS the task adds the database's copy back into a Redis that lost it
(restarted empty: the restore is marked done in Redis, so it happens once), then saves Redis's
values to the database. A Redis restart so loses at most one save interval of usage.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fairness.models import FairShareUsage, Membership
from fairness.scheduling import fair_share
from fairness.scheduling.admission import Admission
from fairness.store.redis_clients import redis_async


@dataclass(frozen=True)
class LiveUsage:
    """Everyone's decayed usage now, in weighted tokens."""

    by_association: dict[str, float]
    total: float


def half_life_seconds() -> float:
    return settings.GP_FAIRSHARE_HALF_LIFE_HOURS * 3600


def _admission() -> Admission:
    return Admission(redis_async(), half_life_seconds=half_life_seconds())


async def live_usage() -> LiveUsage:
    admission = _admission()
    try:
        usage, total, _ = await admission.fair_share_usage()
    finally:
        await admission.close()
    return LiveUsage(usage, total)


def _saved(now: dt.datetime) -> dict[str, float]:
    """The database's copy, decayed to `now`."""
    life = half_life_seconds()
    return {
        str(row.membership_id): fair_share.decayed(row.usage, row.as_of.timestamp(), now.timestamp(), life)
        for row in FairShareUsage.objects.all()
    }


@transaction.atomic
def _save(usage: dict[str, float], now: dt.datetime) -> int:
    members = set(Membership.objects.filter(pk__in=[int(a) for a in usage if a.isdigit()]).values_list("pk", flat=True))
    rows = [
        FairShareUsage(membership_id=int(a), usage=value, as_of=now)
        for a, value in usage.items() if a.isdigit() and int(a) in members
    ]
    FairShareUsage.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["membership"], update_fields=["usage", "as_of"]
    )
    return len(rows)


async def restore_and_save() -> tuple[bool, int]:
    """(whether the database's copy was added back, how many associations were saved)."""
    now = timezone.now()
    admission = _admission()
    try:
        restored = await admission.restore_usage(await sync_to_async(_saved)(now))
        usage, _, _ = await admission.fair_share_usage()
    finally:
        await admission.close()
    return restored, await sync_to_async(_save)(usage, timezone.now())
