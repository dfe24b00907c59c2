"""The OpenAI-compatible endpoints: authenticate, admit, route, forward, account."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable

import httpx
import redis.exceptions
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from fairness import upstream, usage, validation
from fairness.admission import Admission, Demand, Grant, QueueFull, QueueTimeout
from fairness.connections import redis_async
from fairness.epoch import EpochWatch
from fairness.errors import ApiError
from fairness.keys import KeyCache, KeyInfo
from fairness.relay import Relay, StreamTally
from fairness.replicas import ReplicaDirectory, ReplicaInfo

log = logging.getLogger(__name__)

REPLICA_HEADER = "X-GPUPortal-Replica"
QUEUED_HEADER = "X-GPUPortal-Queued-Ms"


class Gateway:
    """Per-process state of the request path: caches and this process's in-flight counts."""

    def __init__(self) -> None:
        self.keys = KeyCache(settings.GP_KEY_CACHE_SECONDS)
        self.epoch = EpochWatch(settings.GP_AUTH_EPOCH_CHECK_SECONDS)
        self.directory: ReplicaDirectory | None = None
        self.in_flight: Counter[str] = Counter()
        self._turn = 0
        self._reload_lock = asyncio.Lock()
        self._admissions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Admission] = (
            weakref.WeakKeyDictionary()
        )

    def admission(self) -> Admission:
        """The admission of the running loop (it owns a pub/sub connection and tasks)."""
        loop = asyncio.get_running_loop()
        existing = self._admissions.get(loop)
        if existing is None:
            existing = Admission(
                redis_async(),
                lease_ttl=settings.GP_LEASE_TTL_SECONDS,
                reserve_slots=settings.GP_RESERVE_SLOTS,
                recheck_seconds=min(1.0, settings.GP_LEASE_TTL_SECONDS / 3),
            )
            self._admissions[loop] = existing
        return existing

    async def refresh(self) -> ReplicaDirectory:
        # One request reloads while the others wait: a request that raced past a reload in
        # progress would otherwise use the stale directory it replaces.
        async with self._reload_lock:
            if await self.epoch.changed(redis_async()) or self.directory is None:
                await self._reload()
        assert self.directory is not None
        return self.directory

    async def _reload(self) -> None:
        self.keys.clear()
        previous = self.directory
        self.directory = await ReplicaDirectory.load()
        gone = set(previous.models()) - set(self.directory.models()) if previous else set()
        for model in gone:
            await self.admission().set_capacity(model, 0)
        for model in self.directory.models():
            await self.admission().set_capacity(model, self.directory.slots(model))

    def choose(self, replicas: list[ReplicaInfo]) -> ReplicaInfo:
        # Least loaded in this process, rotating among equals.
        self._turn += 1
        order = replicas[self._turn % len(replicas) :] + replicas[: self._turn % len(replicas)]
        return min(order, key=lambda r: self.in_flight[r.name] / r.max_num_seqs)


gateway = Gateway()


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    return await _guarded(request, lambda rid: _proxy(request, rid, validation.CHAT))


@csrf_exempt
async def completions(request: HttpRequest) -> HttpResponse:
    return await _guarded(request, lambda rid: _proxy(request, rid, validation.COMPLETIONS))


async def models(request: HttpRequest) -> HttpResponse:
    async def listing(rid: str) -> HttpResponse:
        if request.method != "GET":
            raise ApiError(405, "Use GET for this endpoint.", "method_not_allowed")
        directory = await gateway.refresh()
        await gateway.keys.authenticate(request.headers.get("authorization"))
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "gpuportal"}
            for name in directory.models()
        ]
        return HttpResponse(json.dumps({"object": "list", "data": data}), content_type="application/json")

    return await _guarded(request, listing)


async def _guarded(request: HttpRequest, handler: Callable[[str], Awaitable[HttpResponse]]) -> HttpResponse:
    """Every failure becomes an OpenAI-shaped error; nothing escapes as a 500 page."""
    request_id = "req-" + uuid.uuid4().hex
    try:
        response = await handler(request_id)
    except ApiError as exc:
        response = exc.response()
    except redis.exceptions.RedisError:
        log.exception("redis unavailable")
        response = ApiError(503, "The gateway's state store is unavailable; try again shortly.", "store_unavailable", retry_after=5).response()
    except Exception:
        log.exception("unexpected gateway error for %s", request_id)
        response = ApiError(502, "The gateway failed to handle this request.", "gateway_error").response()
    response["X-Request-Id"] = request_id
    return response


def _read_body(request: HttpRequest) -> bytes:
    too_big = ApiError(
        413,
        f"The request body exceeds the limit of {settings.GP_MAX_BODY_BYTES} bytes.",
        "request_too_large",
    )
    try:
        body = request.body
    except RequestDataTooBig:
        raise too_big from None
    if len(body) > settings.GP_MAX_BODY_BYTES:
        raise too_big
    return body


class Exchange:
    """One forwarded request: holds what must be given back and what gets recorded."""

    def __init__(self, request_id: str, key: KeyInfo, endpoint: str, model: str, stream: bool) -> None:
        self.started = time.perf_counter()
        self.event: usage.UsageEvent = {
            "key_id": key.id,
            "request_id": request_id,
            "endpoint": endpoint,
            "model": model,
            "replica": "",
            "status": 0,
            "stream": stream,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "queued_ms": 0,
            "ttft_ms": None,
            "latency_ms": 0,
            "at": time.time(),
        }
        self.replica: ReplicaInfo | None = None
        self.grant: Grant | None = None
        self._closed = False

    async def admit(self, demand: Demand) -> None:
        """Wait for a turn in the ageing queue; 429 when the key queues too much or too long."""
        try:
            self.grant = await gateway.admission().acquire(demand)
        except QueueFull as exc:
            raise ApiError(429, exc.message, "queue_full", retry_after=exc.retry_after) from None
        except QueueTimeout as exc:
            raise ApiError(429, exc.message, "queue_timeout", retry_after=exc.retry_after) from None
        self.event["queued_ms"] = round(self.grant.queued_seconds * 1000)

    def bind(self, replica: ReplicaInfo) -> None:
        self.replica = replica
        self.event["replica"] = replica.name
        gateway.in_flight[replica.name] += 1

    async def close(self, status: int, tally: StreamTally | None = None) -> None:
        """Release everything held and record usage; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self.replica is not None:
            gateway.in_flight[self.replica.name] -= 1
        if self.grant is not None:
            try:
                await gateway.admission().release(self.grant)
            except (redis.exceptions.RedisError, OSError):  # not renewed any more: expires in one TTL
                log.warning("could not release lease %s", self.grant.lease_id, exc_info=True)
        now = time.perf_counter()
        self.event["status"] = status
        self.event["latency_ms"] = round((now - self.started) * 1000)
        if tally is not None:
            self.event["prompt_tokens"] = tally.prompt_tokens
            self.event["completion_tokens"] = tally.completion_tokens or tally.content_events
            if tally.first_byte_at is not None:
                self.event["ttft_ms"] = round((tally.first_byte_at - self.started) * 1000)
            if tally.failed:
                self.event["status"] = 502
            elif not tally.finished:
                self.event["status"] = 499  # the client went away before the end
        await usage.record(redis_async(), self.event)


async def _proxy(request: HttpRequest, request_id: str, endpoint: str) -> HttpResponse:
    if request.method != "POST":
        raise ApiError(405, "Use POST for this endpoint.", "method_not_allowed")
    directory = await gateway.refresh()
    key = await gateway.keys.authenticate(request.headers.get("authorization"))
    body = _read_body(request)
    parsed = validation.parse(body, endpoint)
    replicas = directory.serving(parsed.model)
    if not replicas:
        raise ApiError(404, f"The model '{parsed.model}' does not exist.", "model_not_found", param="model")

    exchange = Exchange(request_id, key, endpoint, parsed.model, parsed.stream)
    try:
        await exchange.admit(demand_of(key, parsed.model))
        replica = gateway.choose(replicas)
        exchange.bind(replica)
        priority = key.tier.engine_priority if replica.priority_policy else None
        data = validation.upstream_body(parsed, body, priority)
        response = await upstream.open_stream(replica, request.path, data, request_id)
        headers = {REPLICA_HEADER: replica.name, QUEUED_HEADER: str(exchange.event["queued_ms"])}
        if response.status_code != 200:
            error = await _engine_error(response, replica)
            await exchange.close(error.status)
            return error.response(headers)
        if parsed.stream:
            relay = Relay(
                response,
                strip_usage=not parsed.wants_usage,
                on_done=lambda tally: exchange.close(200, tally),
                replica_name=replica.name,
            )
            streaming = StreamingHttpResponse(relay, content_type="text/event-stream")
            streaming["Cache-Control"] = "no-cache"
            streaming["X-Accel-Buffering"] = "no"
            for name, value in headers.items():
                streaming[name] = value
            return streaming
        return await _whole_response(response, replica, exchange, headers)
    except ApiError as exc:
        await exchange.close(exc.status)
        raise
    except asyncio.CancelledError:  # the client left while we waited on the engine
        await asyncio.shield(exchange.close(499))
        raise
    except BaseException:
        await asyncio.shield(exchange.close(502))
        raise


def demand_of(key: KeyInfo, model: str) -> Demand:
    tier = key.tier
    return Demand(
        key_id=str(key.id),
        tier=tier.name,
        per_key_cap=tier.per_key_concurrency,
        pool_cap=tier.pool_concurrency,
        head_start_seconds=tier.head_start_seconds,
        borrow=tier.borrow_idle_slots,
        max_queued_per_key=tier.max_queued_per_key,
        max_wait_seconds=tier.max_queue_wait_seconds,
        group=model,
    )


async def _whole_response(
    response: httpx.Response, replica: ReplicaInfo, exchange: Exchange, headers: dict[str, str]
) -> HttpResponse:
    try:
        raw = await response.aread()
    except httpx.HTTPError as exc:
        raise upstream.translate(exc, replica) from exc
    finally:
        await response.aclose()
    try:
        counts = json.loads(raw).get("usage") or {}
    except (ValueError, AttributeError):
        raise ApiError(502, f"The engine ({replica.name}) sent a garbled response.", "upstream_garbled") from None
    tally = StreamTally(first_byte_at=time.perf_counter(), finished=True)
    tally.take_usage(counts)
    await exchange.close(200, tally)
    result = HttpResponse(raw, content_type="application/json")
    for name, value in headers.items():
        result[name] = value
    return result


async def _engine_error(response: httpx.Response, replica: ReplicaInfo) -> ApiError:
    """The engine's own error, kept when it is a client error and OpenAI-shaped enough."""
    try:
        raw = await response.aread()
    except httpx.HTTPError as exc:
        return upstream.translate(exc, replica)
    finally:
        await response.aclose()
    status = response.status_code
    message, code = f"The engine ({replica.name}) answered {status}.", "upstream_error"
    try:
        body = json.loads(raw)
        detail = body.get("error", body) if isinstance(body, dict) else {}
        if isinstance(detail, dict) and isinstance(detail.get("message"), str):
            message = detail["message"]
            code = str(detail.get("code") or detail.get("type") or code)
        param = detail.get("param") if isinstance(detail, dict) else None
    except ValueError:
        param = None
    if 400 <= status < 500:
        return ApiError(status, message, code, param=param if isinstance(param, str) else None)
    return ApiError(502, f"The engine ({replica.name}) failed: {message}", "upstream_error")
