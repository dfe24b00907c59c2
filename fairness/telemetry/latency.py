"""Time to first token, as people feel it: p50 and p95 per tier (the capacity page) and per key
(/me/usage/), over a recent window of the usage records."""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import QuerySet

from fairness.models import UsageRecord


@dataclass(frozen=True)
class Latency:
    requests: int
    p50_ms: int
    p95_ms: int


def percentile(sorted_values: list[int], q: float) -> int:
    """Nearest rank: the smallest value with at least a fraction q of the values at or below."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def summarise(values: Iterable[int]) -> Latency | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return Latency(len(ordered), percentile(ordered, 0.5), percentile(ordered, 0.95))


def ms_in_words(ms: int | None) -> str:
    """850 -> "850 ms", 1234 -> "1.2 s", 65000 -> "65 s"; None -> "–" (no answered request).
    static/js/capacity.js formats the same way."""
    if ms is None:
        return "–"
    if ms < 1000:
        return f"{ms} ms"
    return f"{ms / 1000:.1f} s" if ms < 10_000 else f"{round(ms / 1000):,} s"


def _answered(since: dt.datetime) -> QuerySet[UsageRecord]:
    # Only answered requests have a first token; a refused one would read as instant.
    return UsageRecord.objects.filter(created_at__gte=since, ttft_ms__isnull=False, status__lt=400)


def ttft_by_tier(since: dt.datetime) -> dict[str, Latency]:
    values: dict[str, list[int]] = defaultdict(list)
    for tier, ttft in _answered(since).values_list("key__tier__name", "ttft_ms"):
        if ttft is not None:  # filtered out already; the stubs cannot tell
            values[tier].append(ttft)
    return {tier: s for tier, v in values.items() if (s := summarise(v)) is not None}


def ttft_by_key(key_ids: Iterable[int], since: dt.datetime) -> dict[int, Latency]:
    values: dict[int, list[int]] = defaultdict(list)
    for key_id, ttft in _answered(since).filter(key_id__in=list(key_ids)).values_list("key_id", "ttft_ms"):
        if ttft is not None:
            values[key_id].append(ttft)
    return {key: s for key, v in values.items() if (s := summarise(v)) is not None}


def finishes_per_second_by_tier(since: dt.datetime, now: dt.datetime) -> dict[str, float]:
    """Requests of each tier that ended in the window, per second: how fast slots come back."""
    seconds = max((now - since).total_seconds(), 1.0)
    counts: dict[str, int] = defaultdict(int)
    for tier in UsageRecord.objects.filter(created_at__gte=since, created_at__lte=now).values_list(
        "key__tier__name", flat=True
    ):
        counts[tier] += 1
    return {tier: n / seconds for tier, n in counts.items()}
