"""Usage records written as the worker writes them, by default at noon on a fixed day."""

from __future__ import annotations

import datetime as dt
import itertools

from fairness.models import ApiKey, UsageRecord

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
