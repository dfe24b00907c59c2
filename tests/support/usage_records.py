"""Usage records written as the worker writes them, by default at noon on a fixed day; and the
record of one live request, once the usage it pushed to Redis is flushed into the table."""

from __future__ import annotations

import datetime as dt
import itertools

from fairness.accounting import usage
from fairness.models import ApiKey, UsageRecord
from fairness.store.redis_clients import redis_sync
from tests.support.polling import wait_for

_ids = itertools.count(1)
# A day well inside the records' retention would move with the clock; reports take explicit dates.
DAY = dt.date(2031, 3, 10)
NOON = dt.datetime.combine(DAY, dt.time(12), dt.UTC)


def record(key: ApiKey, *, at: dt.datetime = NOON, prompt: int = 10, completion: int = 20, queued_ms: int = 0,
           ttft_ms: int | None = 100, status: int = 200, model: str = "sim", tier: str | None = None) -> UsageRecord:
    return UsageRecord.objects.create(
        key=key, request_id=f"req-{next(_ids)}", endpoint="chat/completions", model=model, status=status,
        prompt_tokens=prompt, completion_tokens=completion, queued_ms=queued_ms, ttft_ms=ttft_ms,
        latency_ms=500, tier=key.tier.name if tier is None else tier, created_at=at,
    )


def recorded(request_id: str) -> UsageRecord:
    """The usage record of a request a live gateway answered (its X-Request-Id)."""
    def flushed() -> UsageRecord | None:
        usage.flush(redis_sync())
        return UsageRecord.objects.filter(request_id=request_id).first()

    return wait_for(flushed, timeout=20, what=f"usage of {request_id}")
