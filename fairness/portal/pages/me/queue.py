"""The signed-in person's requests waiting now, with their places and wait estimates: the part of
/me/ that its script keeps live (me/queue.json, polled every two seconds while the page is open).
Only their own: the replay sees everyone's tickets, the answer names theirs alone."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, JsonResponse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_safe
from redis.exceptions import RedisError

from fairness.models import Replica
from fairness.scheduling.admission import Admission
from fairness.scheduling.standing import standing_of
from fairness.store.redis_clients import redis_async
from fairness.telemetry.queue_state import wait_in_words

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _served_models() -> list[str]:
    return sorted(set(Replica.objects.filter(enabled=True).values_list("model", flat=True)))


async def waiting_of(person_id: int) -> list[dict[str, Any]] | None:
    """The person's waiting requests, first first per model; None when admission cannot be read."""
    admission = Admission(redis_async())
    rows: list[dict[str, Any]] = []
    try:
        for model in await sync_to_async(_served_models)():
            view = await admission.queue_view(model)
            standing = await asyncio.to_thread(standing_of, view, admission.now(), person_id)
            for q in standing.mine:
                rows.append({
                    "id": q.request_id, "model": model, "tier": q.tier, "position": q.position,
                    "waited_seconds": round(q.waited, 1),
                    "estimated_wait_seconds": None if q.eta is None else round(q.eta, 1),
                    "estimated_wait": "over an hour" if q.eta is None else wait_in_words(q.eta),
                })
    except (RedisError, OSError):
        return None
    finally:
        await admission.close()
    return rows


@login_required
@require_safe
async def my_queue(request: HttpRequest) -> JsonResponse:
    user: User = await request.auser()  # type: ignore[assignment]  # signed in: login_required
    rows = await waiting_of(user.pk)
    response = JsonResponse({"requests": rows or [], "known": rows is not None})
    add_never_cache_headers(response)
    return response
