"""GET and DELETE /v1/responses/{id}: a stored response, for the person who made it only.

GET asks the replica that stored it (stored_responses.py). DELETE forgets it here: vLLM has no
DELETE, so the engine's memory holds the response until it restarts, and no request through the
gateway reaches it again.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from django.conf import settings
from django.http import HttpResponse

from fairness.gateway import engine_client, stored_responses
from fairness.gateway.errors import ApiError
from fairness.gateway.runtime import GatewayRuntime
from fairness.gateway.views import GatewayRequest

PREFIX = "/v1/responses/"


async def stored_response(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponse:
    response_id, _, tail = request.path.removeprefix(PREFIX).rstrip("/").partition("/")
    if tail:
        raise ApiError(404, f"Unknown endpoint {request.path}.", "unknown_url")
    if request.method not in ("GET", "DELETE"):
        raise ApiError(405, "Use GET or DELETE for a stored response.", "method_not_allowed")
    stored = await stored_responses.find(runtime.redis, response_id, request.key.person_id)
    if stored is None:
        raise stored_responses.not_found(response_id, "response_id")
    if request.method == "DELETE":
        await stored_responses.forget(runtime.redis, response_id)
        return HttpResponse(json.dumps({"id": response_id, "object": "response", "deleted": True}),
                            content_type="application/json")
    replica = next((r for r in request.directory.all if r.name == stored.replica), None)
    if replica is None:
        raise stored_responses.not_found(response_id, "response_id", f" Its replica ({stored.replica}) is gone.")
    status, body = await engine_client.get_capped(
        replica, PREFIX + quote(response_id, safe=""), settings.GP_UPSTREAM_READ_TIMEOUT,
        settings.GP_MAX_ENGINE_RESPONSE_BYTES,
    )
    if status == 404:  # the engine restarted since, and lost it
        raise stored_responses.not_found(response_id, "response_id", f" Its replica ({replica.name}) lost it.")
    if status != 200:
        raise ApiError(502, f"The engine ({replica.name}) answered {status}.", "upstream_error")
    return HttpResponse(body, content_type="application/json")
