"""One batch line sent through the gateway's own request path, in the runner's process: the same
views, admission (tier caps, pool, borrowing, fair share, budgets, rate limits), routing,
retry on a failed replica and accounting as a live request from the batch's key.

What comes back is final (a 200, or an error that would come back again: the error file's) or
passing (the portal or the engines could not take it now: try again later).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import redis.exceptions

from fairness.gateway import views
from fairness.gateway.api_keys import KeyInfo
from fairness.gateway.errors import ApiError
from fairness.gateway.runtime import GatewayRuntime

log = logging.getLogger(__name__)

ENDPOINT_VIEWS = {"/v1/chat/completions": views.chat_completions, "/v1/completions": views.completions,
                  "/v1/embeddings": views.embeddings, "/v1/responses": views.responses}
# Answers that say "not now": queue and rate limits, budgets (a window resets), no replica up,
# the store away. The line waits and goes again, until the batch's window ends.
PASSING_STATUSES = {429, 503}
# Answers that may be the engine's passing trouble, or the request's own doing: a few tries.
RETRIED_STATUSES = {502, 504}
MAX_TRIES_ON_ENGINE_ERRORS = 3


@dataclass(frozen=True)
class Answer:
    status: int
    body: str  # JSON text
    code: str | None = None
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    def passing(self, tries: int) -> bool:
        if self.status in PASSING_STATUSES:
            return True
        return self.status in RETRIED_STATUSES and tries < MAX_TRIES_ON_ENGINE_ERRORS


async def send(
    runtime: GatewayRuntime, key: KeyInfo, endpoint: str, body: str, request_id: str, wait_until: float | None = None,
) -> Answer:
    """The line's answer, through the same path as a client's request; it waits in the queue until
    `wait_until` at most (its batch's window: past it the batch has expired)."""
    try:
        directory = await runtime.refresh()
        request = views.GatewayRequest(
            method="POST", path=endpoint, headers={}, body=body.encode(), request_id=request_id, key=key,
            directory=directory, wait_until=wait_until,
        )
        response = await ENDPOINT_VIEWS[endpoint](request, runtime)
    except ApiError as exc:
        return Answer(exc.status, json.dumps(exc.body()), exc.code, exc.retry_after)
    except (redis.exceptions.RedisError, OSError):
        error = ApiError(503, "The portal's store is unavailable.", "store_unavailable", retry_after=1)
        return Answer(503, json.dumps(error.body()), error.code, 1.0)
    except Exception:  # what a live client would get as a 500: this line's error, the rest run on
        log.exception("batch request %s failed", request_id)
        error = ApiError(500, "The portal failed to run this request.", "internal_error")
        return Answer(500, json.dumps(error.body()), error.code)
    content = response.content.decode()  # type: ignore[attr-defined]  # never streamed: lines cannot ask to
    code = None
    if response.status_code != 200:
        try:
            code = json.loads(content)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
    return Answer(response.status_code, content, code)
