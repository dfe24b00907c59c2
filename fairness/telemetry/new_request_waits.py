"""What a new request of each tier would wait now, per model: the wait estimate's replay
(scheduling/wait_estimate.py) with a newcomer of that tier, someone with nothing running and
nothing used, for the public capacity page. One snapshot per model, kept for a second: the page
is public and polled, and a replay is the same for every reader within that second."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from fairness.scheduling.admission import Admission
from fairness.scheduling.wait_estimate import Newcomer, QueueView, replay

_KEPT_SECONDS = 1.0
_views: dict[str, tuple[float, QueueView]] = {}  # model -> (monotonic time, its snapshot)


@dataclass(frozen=True)
class TierAsks:
    """What a newcomer of a tier brings to the queue."""

    name: str
    per_key_concurrency: int
    head_start_seconds: float
    borrow_idle_slots: bool
    models: frozenset[str] | None  # the models it may use (None: all)


async def new_request_waits(
    redis: Redis, tiers: Sequence[TierAsks], models: Sequence[str]
) -> dict[tuple[str, str], float | None]:
    """(tier, model) -> seconds a new request would wait now (None: beyond the horizon), for each
    model a tier may use; {} when admission cannot be read."""
    admission = Admission(redis)
    try:
        out: dict[tuple[str, str], float | None] = {}
        for model in models:
            view = await _view(admission, model)
            now = admission.now()
            for tier in tiers:
                if tier.models is not None and model not in tier.models:
                    continue
                # A person of nobody's: no lease, no usage, the tier's cap.
                newcomer = Newcomer("\x00newcomer." + tier.name, tier.name, tier.head_start_seconds,
                                    tier.per_key_concurrency, 0.0, tier.borrow_idle_slots)
                out[tier.name, model] = (await asyncio.to_thread(replay, view, now, newcomer)).newcomer_eta
        return out
    except (RedisError, OSError):
        return {}
    finally:
        await admission.close()


async def _view(admission: Admission, model: str) -> QueueView:
    kept = _views.get(model)
    if kept is not None and time.monotonic() - kept[0] < _KEPT_SECONDS:
        return kept[1]
    view = await admission.queue_view(model)
    _views[model] = (time.monotonic(), view)
    return view
