"""The OpenAI-compatible endpoints: admit, route, forward, account.

Each view takes the request the ASGI adapter (gateway/asgi.py) read, its key already checked,
and the process's runtime, and answers with a response or raises ApiError, which the adapter
turns into an OpenAI-shaped error: nothing escapes as a 500 page.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings
from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse

from fairness.gateway import anthropic_shape, engine_client, queue_events, request_parsing, stored_responses
from fairness.gateway.api_keys import KeyInfo
from fairness.gateway.engine_http import EngineAnswer
from fairness.gateway.errors import ApiError
from fairness.gateway.front_end_people import CHAT_HEADER
from fairness.gateway.lifecycle import (
    QUEUE_ESTIMATE_HEADER,
    RequestLifecycle,
    completion_ask,
    demand_of,
    request_estimate,
)
from fairness.gateway.runtime import GatewayRuntime
from fairness.gateway.sse_relay import Relay, StreamTally
from fairness.scheduling import routing
from fairness.scheduling.admission import Grant
from fairness.scheduling.directory import CHAT_MODEL, EMBEDDING_MODEL, RERANKER_MODEL, ReplicaDirectory, ReplicaInfo
from fairness.scheduling.live_counts import pinned_group
from fairness.store.cancelling import cancel_and_wait

log = logging.getLogger(__name__)

REPLICA_HEADER = "X-GPUPortal-Replica"
QUEUED_HEADER = "X-GPUPortal-Queued-Ms"
# The least any budget over the key had left once this request's estimate was reserved.
# What the tightest budget keeps after this request's real charge (whole answers: the charge is
# known before the headers leave), and what it kept before this request (streams: the charge comes
# at the stream's end). Never the reservation: that is a bound, not a charge.
BUDGET_HEADER = "X-GPUPortal-Budget-Remaining"
BUDGET_BEFORE_HEADER = "X-GPUPortal-Budget-Before-Request"
# The completion limit the request ran with, when its budgets left it less than it asked for (or
# it named none): the engine was told this many tokens at most.
LOWERED_HEADER = "X-GPUPortal-Max-Tokens-Lowered"
SESSION_HEADER = "x-session-id"
# The longest a client will wait in the queue (ms): refused at once (429) when the wait estimate
# is longer, else it leaves the queue with 429 at its end.
MAX_QUEUE_HEADER = "x-gpuportal-max-queue-ms"
MOST_QUEUE_MS = 86_400_000


@dataclass(frozen=True)
class GatewayRequest:
    """One /v1 request as the adapter read it: its key valid, checked under `directory` (the
    replicas as of the config epoch it was checked in); the body whole and within the size limit."""

    method: str
    path: str
    headers: Mapping[str, str]  # names in lower case
    body: bytes
    request_id: str
    key: KeyInfo
    directory: ReplicaDirectory
    # A Batch API line's: its batch's window ends then (epoch seconds), and it waits no longer.
    wait_until: float | None = None


async def chat_completions(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponseBase:
    return await _proxy(request, runtime, request_parsing.CHAT)


async def completions(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponseBase:
    return await _proxy(request, runtime, request_parsing.COMPLETIONS)


async def embeddings(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponseBase:
    return await _proxy(request, runtime, request_parsing.EMBEDDINGS)


async def messages(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponseBase:
    """Anthropic's Messages API, as vLLM serves it for a chat model (errors in its shape: asgi.py)."""
    return await _proxy(request, runtime, request_parsing.MESSAGES)


async def responses(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponseBase:
    """OpenAI's Responses API, as vLLM serves it for a chat model. A turn naming
    `previous_response_id` runs on the replica that stored that response (stored_responses.py)."""
    return await _proxy(request, runtime, request_parsing.RESPONSES)


async def rerank(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponseBase:
    """vLLM's rerank (Jina's shape at /v1/rerank, Cohere's at /v2/rerank: the same request)."""
    return await _proxy(request, runtime, request_parsing.RERANK)


async def score(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponseBase:
    return await _proxy(request, runtime, request_parsing.SCORE)


async def models(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponse:
    if request.method != "GET":
        raise ApiError(405, "Use GET for this endpoint.", "method_not_allowed")
    directory, key = request.directory, request.key
    data = [
        _model_object(directory, name, key.tier.name, runtime)
        for name in directory.models()
        if directory.serving(name, key.tier.name) and key.model_access.allows(name)
    ]
    return HttpResponse(
        json.dumps({"object": "list", "data": data}), content_type="application/json"
    )


async def model(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponse:
    """One model, as the SDK's models.retrieve asks: the one /v1/models lists, or a 404."""
    if request.method != "GET":
        raise ApiError(405, "Use GET for this endpoint.", "method_not_allowed")
    name = request.path.removeprefix("/v1/models/").rstrip("/")
    if not request.directory.serving(name, request.key.tier.name) or not request.key.model_access.allows(name):
        # Also for a model that exists but not for this tier or key: /v1/models does not list it either.
        raise ApiError(404, f"The model '{name}' does not exist.", "model_not_found", param="model")
    return HttpResponse(json.dumps(_model_object(request.directory, name, request.key.tier.name, runtime)),
                        content_type="application/json")


def _model_object(directory: ReplicaDirectory, name: str, tier: str, runtime: GatewayRuntime) -> dict[str, str | int]:
    """OpenAI's model object, with what its replicas tell a client: the kind of model (which
    endpoints take it) and, once an engine has stated it, the context it holds (vLLM's field)."""
    serving = directory.serving(name, tier)
    found: dict[str, str | int] = {"id": name, "object": "model", "created": min(r.created for r in serving),
                                   "owned_by": "gpuportal", "kind": directory.kind(name) or CHAT_MODEL}
    context = runtime.context_lengths.stated(serving)
    if context is not None:
        found["max_model_len"] = context
    return found


async def _proxy(request: GatewayRequest, runtime: GatewayRuntime, endpoint: str) -> HttpResponseBase:
    if request.method != "POST":
        raise ApiError(405, "Use POST for this endpoint.", "method_not_allowed")
    directory, key = request.directory, request.key
    body = request.body
    parsed = await runtime.large_bodies.parse(body, endpoint)
    serving = directory.serving(parsed.model)
    if not serving:
        raise ApiError(404, f"The model '{parsed.model}' does not exist.", "model_not_found", param="model")
    _check_kind(directory.kind(parsed.model), parsed)
    max_wait = _client_max_wait(request.headers)
    refuse_if_late = max_wait is not None  # the client's own bound: the estimate may refuse it at once
    if request.wait_until is not None:  # a batch line: it waits within its batch's window
        window = max(0.0, request.wait_until - time.time())
        max_wait = window if max_wait is None else min(max_wait, window)
    replicas = directory.serving(parsed.model, key.tier.name)
    if not replicas:
        raise ApiError(
            403, f"The model '{parsed.model}' is not served to the {key.tier.name} tier.",
            "model_not_available_for_tier", param="model",
        )
    refused_by = key.model_access.refused_by(parsed.model)
    if refused_by is not None:
        raise ApiError(
            403, f"This key may not use the model '{parsed.model}': {refused_by} restricts its models "
            "(GET /v1/models lists the ones it may use).", "model_not_allowed", param="model",
        )
    group = directory.group(parsed.model, key.tier.name)
    pinned = await stored_responses.pinned_replica(runtime, request.key, parsed, replicas)
    if pinned is not None:
        group, replicas = pinned_group(group, pinned.name), [pinned]
    elif not runtime.has_capacity(group):
        raise ApiError(
            503, f"No healthy replica serves '{parsed.model}' right now.", "no_healthy_replica", retry_after=10
        )

    lifecycle = RequestLifecycle(
        runtime, request.request_id, key, endpoint, parsed.model, parsed.stream,
        payload=parsed.payload, body_bytes=len(body), completion_limit=request_parsing.completion_limit(parsed),
    )
    async def answer() -> HttpResponseBase:
        replica, response = await _forward(
            {r.name: r for r in replicas}, lifecycle, parsed, body, request.path, request.request_id,
            key.tier.engine_priority, caller=str(key.person_id),
            cache_salt=request_parsing.owner_cache_salt(key.person_id) if key.tier.isolate_prefix_cache else None,
        )
        headers = {REPLICA_HEADER: replica.name, QUEUED_HEADER: str(lifecycle.event["queued_ms"])}
        if "queue_estimate_ms" in lifecycle.event:
            headers[QUEUE_ESTIMATE_HEADER] = str(lifecycle.event["queue_estimate_ms"])
        lowered = _lowered(parsed, lifecycle.grant)
        if lowered is not None:
            headers[LOWERED_HEADER] = str(lowered)
        if response.status_code != 200:
            error = await engine_error(response, replica)
            await lifecycle.close(error.status)
            return error.response(_with_budget_left(headers, lifecycle))
        remember = functools.partial(
            stored_responses.remember_response, runtime, replica=replica.name, person_id=key.person_id, parsed=parsed,
        ) if parsed.endpoint == request_parsing.RESPONSES else None
        if parsed.stream:
            before = lifecycle.budget_before()
            if before is not None:
                headers[BUDGET_BEFORE_HEADER] = f"{before:.0f}"
            return _streaming(response, replica, lifecycle, parsed, headers, remember)
        return await _whole_response(response, replica, lifecycle, headers, remember)

    handle = request.request_id  # its ticket's: a stream tells its place, GET /v1/queue names it

    async def admitted_answer() -> HttpResponseBase:
        try:
            await lifecycle.admit(demand_of(
                key, group, _preference(replicas, parsed, request.headers), max_wait=max_wait,
                refuse_if_late=refuse_if_late,
                estimate=request_estimate(parsed, len(body)),
                completion=completion_ask(parsed, len(body), runtime.context_lengths.of(replicas))
                if key.budget_rules else None,  # no budgets: no work (the context: its replicas' smallest)
                redoable=not parsed.stream,
            ), handle)
            return await _redone_while_revoked(lifecycle, answer)
        except ApiError as exc:
            await lifecycle.close(exc.status)
            raise
        except asyncio.CancelledError:  # the client left while we waited
            await asyncio.shield(lifecycle.close(499))
            raise
        except BaseException:
            await asyncio.shield(lifecycle.close(502))
            raise

    if not (parsed.stream and key.tier.queue_events):
        return await admitted_answer()
    return await queue_events.answer_or_wait(
        admitted_answer(), after=settings.GP_QUEUE_EVENTS_AFTER_MS / 1000,
        where=functools.partial(runtime.admission.ticket_wait, group, handle),
        error_event=anthropic_shape.sse_event if parsed.endpoint == request_parsing.MESSAGES else ApiError.sse_event,
    )


async def _redone_while_revoked(
    lifecycle: RequestLifecycle, answer: Callable[[], Awaitable[HttpResponseBase]]
) -> HttpResponseBase:
    """The answer. A whole (not streamed) answer on a borrowed slot can be redone, so admission may
    ask the slot back for a chat: the engine request is then dropped (the engine aborts it when its
    connection closes), not charged, and sent again once the request has a slot again, from its
    old place in line. The client only waits longer."""
    admission = lifecycle.runtime.admits
    while True:
        grant = lifecycle.grant
        if grant is None or not (grant.borrowed and grant.demand.revocable):
            return await answer()
        revoked = asyncio.Event()
        admission.when_revoked(grant.lease_id, revoked.set)
        answering = asyncio.ensure_future(answer())
        asked = asyncio.ensure_future(revoked.wait())
        try:
            await asyncio.wait({answering, asked}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await cancel_and_wait(answering)  # the client left: the answer's own handling runs
            raise
        finally:
            admission.when_revoked(grant.lease_id, None)
            asked.cancel()
        if answering.done():
            return answering.result()
        await cancel_and_wait(answering)
        log.info("request %s gave its borrowed slot back for a chat; it runs again",
                 lifecycle.event["request_id"])
        await lifecycle.requeue()


# What each endpoint needs the model to be run as.
_GENERATING = frozenset({CHAT_MODEL})
_SCORING = frozenset({EMBEDDING_MODEL, RERANKER_MODEL})  # vLLM scores with either pooling kind
_KINDS_OF_ENDPOINT = {request_parsing.CHAT: _GENERATING, request_parsing.COMPLETIONS: _GENERATING,
                      request_parsing.MESSAGES: _GENERATING, request_parsing.RESPONSES: _GENERATING,
                      request_parsing.EMBEDDINGS: frozenset({EMBEDDING_MODEL}),
                      request_parsing.RERANK: _SCORING, request_parsing.SCORE: _SCORING}
_ENDPOINT_PATHS = {CHAT_MODEL: "/v1/chat/completions, /v1/completions, /v1/responses and /v1/messages",
                   EMBEDDING_MODEL: "/v1/embeddings, /v1/rerank and /v1/score",
                   RERANKER_MODEL: "/v1/rerank and /v1/score"}


def _check_kind(kind: str | None, parsed: request_parsing.ProxyRequest) -> None:
    """A chat request to an embedding model, or the reverse, is the client's mistake: say so
    before it waits for a slot on an engine that would refuse it."""
    if kind is not None and kind not in _KINDS_OF_ENDPOINT[parsed.endpoint]:
        raise ApiError(
            400, f"The model '{parsed.model}' is served as a{'n' if kind == EMBEDDING_MODEL else ''} {kind} model: "
            f"send it to {_ENDPOINT_PATHS[kind]}.", "wrong_model_kind", param="model",
        )


def _client_max_wait(headers: Mapping[str, str]) -> float | None:
    """X-GPUPortal-Max-Queue-Ms in seconds, or None when not sent; 400 for anything but whole ms."""
    raw = headers.get(MAX_QUEUE_HEADER)
    if raw is None:
        return None
    raw = raw.strip()
    if not raw.isdigit() or not raw.isascii() or int(raw) > MOST_QUEUE_MS:
        raise ApiError(400, f"X-GPUPortal-Max-Queue-Ms must be a whole number of milliseconds, 0 to {MOST_QUEUE_MS}.",
                       "invalid_value", param="X-GPUPortal-Max-Queue-Ms")
    return int(raw) / 1000


def _lowered(parsed: request_parsing.ProxyRequest, grant: Grant | None) -> int | None:
    """The completion limit the budgets set, if below the one the request would have run to."""
    if grant is None or grant.completion_limit is None:
        return None
    stated = request_parsing.completion_limit(parsed)
    return grant.completion_limit if stated is None or grant.completion_limit < stated else None


def _preference(
    replicas: list[ReplicaInfo], parsed: request_parsing.ProxyRequest, headers: Mapping[str, str]
) -> tuple[str, ...]:
    """The deployment's replicas in this conversation's order (rendezvous hashing): admission
    gives the request a slot on the first that has one within the load bound. None to choose
    from, or no conversation: empty, the least loaded wins."""
    if len(replicas) == 1:
        return ()
    # Open WebUI names its conversation: the chat's id keeps it on the replica that caches it.
    conversation = routing.conversation_key(parsed.payload, headers.get(SESSION_HEADER) or headers.get(CHAT_HEADER))
    if conversation is None:
        return ()
    return tuple(r.name for r in routing.preference(replicas, conversation))


async def _forward(
    replicas: dict[str, ReplicaInfo], lifecycle: RequestLifecycle, parsed: request_parsing.ProxyRequest,
    body: bytes, path: str, request_id: str, engine_priority: int, *, caller: str, cache_salt: str | None,
) -> tuple[ReplicaInfo, EngineAnswer]:
    """Send to the replica the lease holds a slot on; if it fails before answering anything,
    wait for a slot on another (keeping the place in line) and send there, once.

    A refused or reset connection marks the replica down at once. A 5xx or a timeout may be
    this request's own doing (a body that makes the engine fail): it counts against the replica
    only together with other callers' failures (`caller`: the key's owner).
    """
    assert lifecycle.grant is not None
    grant = lifecycle.grant
    for attempt in range(2):
        replica = replicas.get(grant.replica) or await _newly_known(lifecycle.runtime, grant.replica)
        last = attempt == 1 or len(replicas) == 1
        lifecycle.bind(replica)
        data = request_parsing.upstream_body(
            parsed, body, engine_priority if replica.priority_policy else None, cache_salt,
            max_completion=grant.completion_limit,
        )
        try:
            response = await engine_client.open_stream(replica, path, data, request_id, lifecycle.trace_headers)
        except ApiError as exc:
            if exc.code == "upstream_timeout":
                await lifecycle.runtime.request_failed(replica, caller)
            if exc.code != "upstream_unreachable":
                raise  # a timeout is a busy engine, not a dead one: no retry
            await lifecycle.runtime.replica_failed(replica)
            if last or not lifecycle.runtime.has_capacity(grant.demand.group):
                raise
            grant = await lifecycle.move(replica)
            continue
        if response.status_code >= 500:
            try:
                await lifecycle.runtime.request_failed(replica, caller)
            except BaseException:
                await response.aclose()  # its connection goes back to the pool, not to waste
                raise
            if not last:
                await response.aclose()
                grant = await lifecycle.move(replica)
                continue
        return replica, response
    raise AssertionError("unreachable: the second attempt is the last")


async def _newly_known(runtime: GatewayRuntime, name: str) -> ReplicaInfo:
    """A replica admission knows and this process's directory does not yet: another process
    reloaded the replicas first. Reload them too."""
    directory = await runtime.refresh()
    for replica in directory.all:
        if replica.name == name:
            return replica
    raise ApiError(503, "The replicas changed while the request waited; retry.", "replicas_changed", retry_after=1)


def _streaming(
    response: EngineAnswer, replica: ReplicaInfo, lifecycle: RequestLifecycle,
    parsed: request_parsing.ProxyRequest, headers: dict[str, str],
    remember: Callable[[str], Awaitable[None]] | None = None,
) -> StreamingHttpResponse:
    relay = Relay(
        response,
        strip_usage=not parsed.wants_usage,
        on_done=lambda tally: lifecycle.close(200, tally),
        replica_name=replica.name,
        error_event=anthropic_shape.sse_event if parsed.endpoint == request_parsing.MESSAGES else ApiError.sse_event,
        on_response_id=remember,
    )
    streaming = StreamingHttpResponse(relay, content_type="text/event-stream")
    streaming["Cache-Control"] = "no-cache"
    streaming["X-Accel-Buffering"] = "no"
    for name, value in headers.items():
        streaming[name] = value
    return streaming


async def _whole_response(
    response: EngineAnswer, replica: ReplicaInfo, lifecycle: RequestLifecycle, headers: dict[str, str],
    remember: Callable[[str], Awaitable[None]] | None = None,
) -> HttpResponse:
    """The engine's whole answer, its usage charged; `remember` notes a Responses answer's id
    before the client has it (so its next turn finds the replica)."""
    raw = await engine_client.read_whole(response, replica)
    try:
        answer = _parsed(raw)
        counts = answer.get("usage") or {}
    except (ValueError, AttributeError, RecursionError):  # nested past the parser's depth
        raise ApiError(502, f"The engine ({replica.name}) sent a garbled response.", "upstream_garbled") from None
    tally = StreamTally(first_byte_at=time.perf_counter(), finished=True)
    tally.take_usage(counts)
    if lifecycle.trace is not None:
        lifecycle.trace.finish_reasons(answer)
    if remember is not None and isinstance(answer.get("id"), str):
        await remember(answer["id"])
    await lifecycle.close(200, tally)
    result = HttpResponse(raw, content_type="application/json")
    for name, value in _with_budget_left(headers, lifecycle).items():
        result[name] = value
    return result


def _with_budget_left(headers: dict[str, str], lifecycle: RequestLifecycle) -> dict[str, str]:
    """The headers with what the budgets keep after this (closed) request's real charge."""
    left = lifecycle.budget_after()
    return headers if left is None else {**headers, BUDGET_HEADER: f"{left:.0f}"}


def _parsed(raw: bytes) -> Any:
    """An engine's JSON: orjson's parse, the standard library's for what orjson refuses (an
    integer past 64 bits) so that the answer is judged as before."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


async def engine_error(response: EngineAnswer, replica: ReplicaInfo) -> ApiError:
    """The engine's own error, kept when it is a client error and OpenAI-shaped enough."""
    try:
        raw = await engine_client.read_whole(response, replica)
    except ApiError as exc:
        return exc
    status = response.status_code
    message = f"The engine ({replica.name}) answered {status}."
    code: str | None = "upstream_error"
    param = None
    try:
        body = json.loads(raw)
        detail = body.get("error", body) if isinstance(body, dict) else {}
        if isinstance(detail, dict) and isinstance(detail.get("message"), str):
            message = detail["message"]
            code = _openai_code(detail.get("code"))
            param = detail.get("param") if isinstance(detail.get("param"), str) else None
    except (ValueError, RecursionError):
        pass
    if 400 <= status < 500:
        # The type is OpenAI's for the status (errors.TYPES), not the engine's exception name.
        return ApiError(status, message, code, param=param)
    return ApiError(502, f"The engine ({replica.name}) failed: {message}", "upstream_error")


def _openai_code(code: object) -> str | None:
    """The engine's `code` when it is one in OpenAI's sense (a string such as
    "context_length_exceeded"); vLLM repeats the HTTP status there (400), and OpenAI then sends null."""
    if isinstance(code, str) and code and not code.isdigit():
        return code
    return None
