"""A person's usage per day in both units: the raw tokens engines counted (prompt, completion)
and the weighted tokens budgets and fair share charge for them (fair_share.weighted_tokens).

The raw counts are the hourly rows the usage pages already read (usage_rollup.per_day). The
weighted count also needs how many prompt tokens the engine found in its prefix cache, which
only the per-request records hold, so a day older than the records kept (GP_USAGE_RECORDS_DAYS)
has no weighted figure rather than a wrong one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Q, Sum
from django.db.models.functions import Least, TruncDay
from django.utils import timezone

from fairness.accounting import usage_rollup
from fairness.models import UsageHourly, UsageRecord
from fairness.scheduling.fair_share import weighted_tokens

if TYPE_CHECKING:
    from django.contrib.auth.models import User

DAYS = 30


@dataclass(frozen=True)
class Weights:
    prompt: float
    cached_prompt: float
    completion: float

    @property
    def sentence(self) -> str:
        """The rule once, for a page, with the deployment's weights (GP_FAIRSHARE_WEIGHT_*)."""
        return (f"Budgets and fair share count weighted tokens: {self.prompt:g} × each prompt token, "
                f"{self.cached_prompt:g} × each prompt token the engine already had cached, and "
                f"{self.completion:g} × each completion token.")


def weights() -> Weights:
    return Weights(settings.GP_FAIRSHARE_WEIGHT_PROMPT, settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT,
                   settings.GP_FAIRSHARE_WEIGHT_COMPLETION)


@dataclass(frozen=True)
class Day:
    day: dt.date
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # None: the day's records are no longer kept
    weighted_tokens: float | None  # likewise

    @property
    def weighted_whole(self) -> int | None:
        return None if self.weighted_tokens is None else round(self.weighted_tokens)


def _start_of_today() -> dt.datetime:
    return timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)


def _cached_per_day(user: User, since: dt.datetime) -> dict[dt.date, int]:
    # A record written around the gateway names no person: its key's owner asked (as the hourly rows).
    records = UsageRecord.objects.filter(Q(person=user) | Q(person=None, key__owner=user), created_at__gte=since)
    rows = (records.annotate(day=TruncDay("created_at")).values("day").order_by("day")
            .annotate(cached=Sum(Least("cached_tokens", "prompt_tokens"))))  # as the gateway charged it
    return {row["day"].date(): row["cached"] or 0 for row in rows}


def days_of(user: User, days: int = DAYS) -> list[Day]:
    """Every day of the last `days` (today included, UTC), oldest first, zeros included."""
    first = _start_of_today() - dt.timedelta(days=days - 1)
    raw = {row["day"].date(): row for row in
           usage_rollup.per_day(UsageHourly.objects.filter(person=user, hour__gte=first))}
    cached = _cached_per_day(user, first)
    kept_since = timezone.now() - dt.timedelta(days=settings.GP_USAGE_RECORDS_DAYS)
    w = weights()
    out = []
    for n in range(days):
        start = first + dt.timedelta(days=n)
        row = raw.get(start.date(), {})
        prompt, completion = row.get("prompt_tokens") or 0, row.get("completion_tokens") or 0
        known = start >= kept_since
        cached_tokens = cached.get(start.date(), 0) if known else None
        out.append(Day(
            day=start.date(), requests=row.get("requests") or 0, prompt_tokens=prompt, completion_tokens=completion,
            cached_tokens=cached_tokens,
            weighted_tokens=None if cached_tokens is None else weighted_tokens(
                prompt, completion, w.prompt, w.completion, cached=cached_tokens, w_cached=w.cached_prompt),
        ))
    return out


def total(days: list[Day]) -> Day:
    """The days added up (the weighted total is None if any day's is): dated the last day."""
    weighted = [d.weighted_tokens for d in days]
    cached = [d.cached_tokens for d in days]
    return Day(
        day=days[-1].day if days else timezone.now().date(),
        requests=sum(d.requests for d in days), prompt_tokens=sum(d.prompt_tokens for d in days),
        completion_tokens=sum(d.completion_tokens for d in days),
        cached_tokens=None if None in cached else sum(c or 0 for c in cached),
        weighted_tokens=None if None in weighted else sum(x or 0.0 for x in weighted),
    )
