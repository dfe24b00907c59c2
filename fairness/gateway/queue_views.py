"""GET /v1/queue (a gpuportal extension): where the calling person's waiting requests stand.

For each model the key may use: the person's requests waiting for it (their request id, place
and wait estimate: scheduling/wait_estimate.py), how many wait for it in all, and how long a new
request of theirs would wait now. Nobody else's requests are named. Each answer replays the
queue of every model, so a key's answers are kept for a second: asking faster costs the gateway
nothing more and tells nothing newer.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from django.http import HttpResponse

from fairness.gateway.errors import ApiError
from fairness.gateway.lifecycle import demand_of
from fairness.gateway.runtime import GatewayRuntime
from fairness.gateway.views import GatewayRequest
from fairness.scheduling.standing import standing_of
from fairness.scheduling.wait_estimate import Newcomer, replay

_KEPT_SECONDS = 1.0
_MOST_KEPT = 1024  # answers kept at once (one per key asking)
_answers: dict[int, tuple[float, bytes]] = {}  # key id -> (when, the answer)


async def queue(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponse:
    if request.method != "GET":
        raise ApiError(405, "Use GET for this endpoint.", "method_not_allowed")
    key = request.key
    kept = _answers.get(key.id)
    now = time.monotonic()
    if kept is None or now - kept[0] >= _KEPT_SECONDS:
        kept = (now, orjson.dumps(await _standing(request, runtime)))
        if len(_answers) >= _MOST_KEPT:
            _answers.clear()
        _answers[key.id] = kept
    return HttpResponse(kept[1], content_type="application/json")


async def _standing(request: GatewayRequest, runtime: GatewayRuntime) -> dict[str, Any]:
    directory, key = request.directory, request.key
    admission = runtime.admission
    requests: list[dict[str, Any]] = []
    models: list[dict[str, Any]] = []
    for name in directory.models():
        if not directory.serving(name, key.tier.name) or not key.model_access.allows(name):
            continue
        group = directory.group(name, key.tier.name)
        demand = demand_of(key, group)
        view = await admission.queue_view(group, key.unit, key.association, demand.fairshare_weight)
        at = admission.now()
        # Off the event loop: a replay may take a while.
        standing = await asyncio.to_thread(standing_of, view, at, key.person_id)
        requests += [{
            "id": q.request_id, "model": name, "tier": q.tier, "position": q.position,
            "waited_ms": round(q.waited * 1000), "estimated_wait_ms": None if q.eta is None else round(q.eta * 1000),
        } for q in standing.mine]
        newcomer = Newcomer(key.unit, key.tier.name, demand.head_start_seconds, demand.per_key_cap, view.delay,
                            demand.borrow)
        wait = (await asyncio.to_thread(replay, view, at, newcomer)).newcomer_eta
        models.append({"model": name, "waiting": standing.waiting,
                       "new_request_wait_ms": None if wait is None else round(wait * 1000)})
    return {"object": "queue", "requests": requests, "models": models}
