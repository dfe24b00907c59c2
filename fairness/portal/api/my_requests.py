"""GET /api/me/requests: the person's own request log, a page at a time, for scripts on their side
(the same records and filters as /me/requests/; another person's requests are never in it).
Authenticated like the rest of /api/me/ (one of their keys, or their session)."""

from __future__ import annotations

import datetime as dt

from ninja import Field, Query, Router, Schema

from fairness.gateway.errors import ApiError
from fairness.models import UsageRecord
from fairness.portal.api.me import OwnKey, OwnRequest, OwnSession
from fairness.portal.reports import request_log

router = Router(tags=["me"], auth=[OwnKey(), OwnSession()])
MOST_PER_PAGE = 200


class MyRequestOut(Schema):
    id: str = Field(description="The request's id (its X-Request-Id).")
    arrived: dt.datetime = Field(description="When the gateway had checked its key and read its body (UTC).")
    key: str | None = Field(description="Your key's prefix; null when a front end's key sent it for you.")
    front_end: str = Field(description="The front end that sent it for you (Open WebUI), or empty.")
    endpoint: str
    model: str
    tier: str
    replica: str = Field(description="Where it ran; empty when it never reached an engine.")
    status: int
    ended: str = Field(description="done, client_gone, engine_error, refused or shutdown; empty before it was "
                       "recorded.")
    held_by: str = Field(description="What held it in the queue: person_cap, tier_pool, no_slot or "
                         "fair_share_order; empty when it never waited.")
    refusal: str = Field(description="Admission's code when it refused it (queue_full, queue_timeout, "
                         "rate_limited, budget_exceeded), or empty.")
    queued_ms: int
    queue_estimate_ms: int | None
    ttft_ms: int | None = Field(description="From arrival to its first token; null: none came.")
    latency_ms: int = Field(description="From arrival to its end.")
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    weighted_tokens: float = Field(description="What fair share and budgets charge, at today's weights.")


class MyRequestsOut(Schema):
    requests: list[MyRequestOut] = Field(description="Newest first.")
    older: str | None = Field(description="Pass as `before` for the next (older) page; null: none.")


def _out(record: UsageRecord, person_id: int) -> MyRequestOut:
    return MyRequestOut(
        id=record.request_id, arrived=record.created_at,
        key=record.key.prefix if record.key.owner_id == person_id else None,
        front_end=request_log.front_end_of(record), endpoint=record.endpoint, model=record.model, tier=record.tier,
        replica=record.replica, status=record.status, ended=record.ended, held_by=record.held_by,
        refusal=record.refusal, queued_ms=record.queued_ms, queue_estimate_ms=record.queue_estimate_ms,
        ttft_ms=record.ttft_ms, latency_ms=record.latency_ms, prompt_tokens=record.prompt_tokens,
        cached_tokens=record.cached_tokens, completion_tokens=record.completion_tokens,
        weighted_tokens=request_log.charge_of(record),
    )


class MyRequestsQuery(Schema):
    # Strings, not typed values: a bad one gets the log's own sentence (as the page says it).
    key: str = Field("", description="One of your keys' prefixes.")
    model: str = ""
    status: str = Field("", description="An HTTP status, e.g. 429.")
    ended: str = Field("", description="done, client_gone, engine_error, refused or shutdown.")
    from_: str = Field("", alias="from", description="UTC, YYYY-MM-DDTHH:MM, or a date (its midnight).")
    to: str = Field("", description="UTC, not included.")
    before: str = Field("", description="The `older` of the page before.")
    limit: int = Field(request_log.PAGE_SIZE, ge=1, le=MOST_PER_PAGE)


@router.get("/requests", response=MyRequestsOut,
            summary="Your requests, newest first: what held each in the queue and how it ended")
def my_requests(request: OwnRequest, query: Query[MyRequestsQuery]) -> MyRequestsOut:
    person_id = request.auth.pk
    filters = request_log.read_filters({"key": query.key, "model": query.model, "status": query.status,
                                        "ended": query.ended, "from": query.from_, "to": query.to},
                                       with_person=False)
    if filters.problems:
        raise ApiError(400, " ".join(filters.problems), "bad_filter")
    page = request_log.page_of(request_log.rows_for(filters, person_id=person_id), before=query.before,
                               size=query.limit)
    return MyRequestsOut(requests=[_out(r, person_id) for r in page.rows], older=page.older)
