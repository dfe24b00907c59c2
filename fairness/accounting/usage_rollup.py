"""Usage per key per hour, kept up to date as records are flushed; read back for the pages."""

from __future__ import annotations

import bisect
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.db.models import QuerySet, Sum
from django.db.models.functions import TruncDay

from fairness.models import QUEUE_WAIT_BUCKETS_MS, ApiKey, UsageHourly, UsageRecord

BUCKETS = len(QUEUE_WAIT_BUCKETS_MS) + 1  # the last one holds everything above the top bound


def bucket_of(queued_ms: int) -> int:
    return bisect.bisect_left(QUEUE_WAIT_BUCKETS_MS, queued_ms)


def add(records: Iterable[UsageRecord]) -> None:
    """Fold records into their hourly rows (inside the caller's transaction)."""
    totals: dict[tuple[int, int | None, dt.datetime], dict[str, Any]] = defaultdict(
        lambda: {"requests": 0, "errors": 0, "prompt": 0, "completion": 0, "waits": [0] * BUCKETS}
    )
    records = list(records)
    # A record written around the gateway names no person: its key's owner asked.
    owners = dict(ApiKey.objects.filter(pk__in={r.key_id for r in records if r.person_id is None})
                  .values_list("pk", "owner_id"))
    for record in records:
        hour = record.created_at.replace(minute=0, second=0, microsecond=0)
        slot = totals[(record.key_id, record.person_id or owners.get(record.key_id), hour)]
        slot["requests"] += 1
        slot["errors"] += record.status >= 400
        slot["prompt"] += record.prompt_tokens
        slot["completion"] += record.completion_tokens
        slot["waits"][bucket_of(record.queued_ms)] += 1
    for (key_id, person_id, hour), slot in totals.items():
        row, _ = UsageHourly.objects.select_for_update().get_or_create(key_id=key_id, person_id=person_id, hour=hour)
        waits = row.queue_wait_counts or [0] * BUCKETS
        row.requests += slot["requests"]
        row.errors += slot["errors"]
        row.prompt_tokens += slot["prompt"]
        row.completion_tokens += slot["completion"]
        # A stored row with fewer buckets is padded; one with more keeps only the current ones.
        padded = waits + [0] * (BUCKETS - len(waits))
        row.queue_wait_counts = [a + b for a, b in zip(padded, slot["waits"], strict=False)]
        row.save()


def wait_percentile(counts: list[int], q: float) -> int | None:
    """The bucket bound (ms) under which a fraction q of the waits fell; None without data."""
    total = sum(counts)
    if total == 0:
        return None
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= q * total:
            return QUEUE_WAIT_BUCKETS_MS[index] if index < len(QUEUE_WAIT_BUCKETS_MS) else QUEUE_WAIT_BUCKETS_MS[-1]
    return QUEUE_WAIT_BUCKETS_MS[-1]


def summary(rows: Iterable[UsageHourly]) -> dict[str, Any]:
    """Requests, tokens and queue-wait median / p95 over some UsageHourly rows."""
    waits = [0] * BUCKETS
    requests = prompt = completion = errors = 0
    for row in rows:
        requests += row.requests
        errors += row.errors
        prompt += row.prompt_tokens
        completion += row.completion_tokens
        for index, count in enumerate(row.queue_wait_counts or []):
            waits[index] += count
    return {
        "requests": requests, "errors": errors, "prompt_tokens": prompt, "completion_tokens": completion,
        "queue_wait_p50_ms": wait_percentile(waits, 0.5), "queue_wait_p95_ms": wait_percentile(waits, 0.95),
    }


def per_day(rows: QuerySet[UsageHourly]) -> list[dict[str, Any]]:
    """Requests and tokens per day, for the usage chart."""
    return list(
        rows.annotate(day=TruncDay("hour")).values("day").order_by("day").annotate(
            requests=Sum("requests"), prompt_tokens=Sum("prompt_tokens"), completion_tokens=Sum("completion_tokens")
        )
    )


def prune(now: dt.datetime, records_for: dt.timedelta, hourly_for: dt.timedelta) -> tuple[int, int]:
    """Drop raw records and hourly rows past their retention."""
    records = UsageRecord.objects.filter(created_at__lt=now - records_for).delete()[0]
    hourly = UsageHourly.objects.filter(hour__lt=now - hourly_for).delete()[0]
    return records, hourly
