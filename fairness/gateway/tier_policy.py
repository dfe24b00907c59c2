"""A tier's policy as the request path reads it: a frozen copy of the Tier row's limits, made once
per key lookup and shared by the key cache, admission's demand and the budget rules."""

from __future__ import annotations

from dataclasses import dataclass

from fairness.models import Tier


@dataclass(frozen=True)
class TierPolicy:
    name: str
    per_key_concurrency: int
    pool_concurrency: int | None
    head_start_seconds: float
    max_queue_wait_seconds: float
    max_queued_per_key: int
    max_queued: int | None
    engine_priority: int
    borrow_idle_slots: bool
    isolate_prefix_cache: bool
    fairshare_weight_seconds: float
    # Per-person and tier-wide rate limits (0: none).
    person_requests_per_minute: int = 0
    person_tokens_per_minute: int = 0
    requests_per_minute: int = 0
    tokens_per_minute: int = 0
    queue_events: bool = True  # a streamed request that waits is told its place (queue_events.py)

    @classmethod
    def of(cls, tier: Tier) -> TierPolicy:
        return cls(
            name=tier.name,
            per_key_concurrency=tier.per_key_concurrency,
            pool_concurrency=tier.pool_concurrency,
            head_start_seconds=tier.head_start_seconds,
            max_queue_wait_seconds=tier.max_queue_wait_seconds,
            max_queued_per_key=tier.max_queued_per_key,
            max_queued=tier.max_queued,
            engine_priority=tier.engine_priority,
            borrow_idle_slots=tier.borrow_idle_slots,
            isolate_prefix_cache=tier.isolate_prefix_cache,
            fairshare_weight_seconds=tier.fairshare_weight_seconds,
            person_requests_per_minute=tier.key_requests_per_minute or 0,
            person_tokens_per_minute=tier.key_tokens_per_minute or 0,
            requests_per_minute=tier.requests_per_minute or 0,
            tokens_per_minute=tier.tokens_per_minute or 0,
            queue_events=tier.queue_events,
        )
