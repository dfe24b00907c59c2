"""The one outbound-HTTP seam: proxied requests on the lean engine client, everything else (TLS
engines, probes, scrapes, webhooks) on a pooled httpx client per event loop; error mapping."""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Mapping

import anyio.lowlevel
import httpx
from django.conf import settings

from fairness.gateway import engine_http
from fairness.gateway.engine_http import EngineAnswer
from fairness.gateway.errors import ApiError
from fairness.scheduling.directory import ReplicaInfo

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def client() -> httpx.AsyncClient:
    """A pooled client of the running loop (a client must not cross loops)."""
    loop = asyncio.get_running_loop()
    pooled = _clients.get(loop)
    if pooled is None:
        timeout = httpx.Timeout(
            connect=settings.GP_UPSTREAM_CONNECT_TIMEOUT,
            read=settings.GP_UPSTREAM_READ_TIMEOUT,
            write=30.0,
            pool=settings.GP_UPSTREAM_CONNECT_TIMEOUT,
        )
        # The engines are on a trusted network; no env proxies.
        pooled = _clients[loop] = httpx.AsyncClient(timeout=timeout, trust_env=False)
    return pooled


async def prepare() -> bool:
    """Make the running loop's pooled client, and load the network layer its first connection
    would (anyio, httpx's own), now rather than at first use: True if it was not made yet.
    Imports on the event loop hold every request on it."""
    made = asyncio.get_running_loop() not in _clients
    client()
    await anyio.lowlevel.checkpoint()  # loads anyio's asyncio backend
    return made


async def aclose() -> None:
    """Close the running loop's clients (their connections belong to this loop)."""
    engine_http.close_pool()
    pooled = _clients.pop(asyncio.get_running_loop(), None)
    if pooled is not None:
        await pooled.aclose()


def translate(exc: httpx.HTTPError, replica: ReplicaInfo) -> ApiError:
    """An httpx failure as the error the client should see. Only "upstream_unreachable" says the
    replica itself is in trouble (the request path marks it down)."""
    if isinstance(exc, httpx.TimeoutException):
        return ApiError(504, f"The engine ({replica.name}) did not answer in time.", "upstream_timeout")
    if isinstance(exc, engine_http.ResponseTooLarge):
        return ApiError(
            502, f"The engine ({replica.name}) sent a response larger than the gateway accepts.",
            "engine_response_too_large",
        )
    if isinstance(exc, httpx.LocalProtocolError):  # the request could not be written as it was
        return ApiError(
            502, f"The request could not be sent to the engine ({replica.name}): check its configuration.",
            "upstream_misconfigured",
        )
    return ApiError(502, f"The engine ({replica.name}) is unreachable.", "upstream_unreachable")


async def open_stream(
    replica: ReplicaInfo, path: str, body: bytes, request_id: str, trace_headers: Mapping[str, str] | None = None
) -> EngineAnswer:
    """POST to the replica and return once the response headers are in; the body streams.
    `trace_headers`: the engine call's W3C traceparent (tracing.py), so the engine's spans join.

    Plain-HTTP engines (the usual case: the same host or a private network) go through the lean
    client; an engine behind TLS through httpx.
    """
    headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
    if replica.api_key:
        headers["Authorization"] = f"Bearer {replica.api_key}"
    if trace_headers:
        headers.update(trace_headers)
    try:
        if replica.base_url.startswith("http://"):
            return await engine_http.post(
                replica.base_url, path, body, headers,
                connect_timeout=settings.GP_UPSTREAM_CONNECT_TIMEOUT,
                read_timeout=settings.GP_UPSTREAM_READ_TIMEOUT,
                max_response_bytes=settings.GP_MAX_ENGINE_RESPONSE_BYTES,
            )
        pooled = client()
        request = pooled.build_request("POST", replica.base_url + path, content=body, headers=headers)
        return await pooled.send(request, stream=True)
    except httpx.HTTPError as exc:
        raise translate(exc, replica) from exc


async def read_whole(response: EngineAnswer, replica: ReplicaInfo) -> bytes:
    """A non-streaming answer's whole body, at most GP_MAX_ENGINE_RESPONSE_BYTES (502
    engine_response_too_large beyond); the response is closed either way."""
    try:
        if isinstance(response, httpx.Response):  # an engine behind TLS
            return await _read_capped(response, settings.GP_MAX_ENGINE_RESPONSE_BYTES)
        return await response.aread()  # the lean client caps it (open_stream passed the limit)
    except httpx.HTTPError as exc:
        raise translate(exc, replica) from exc
    finally:
        await response.aclose()


async def _read_capped(response: httpx.Response, limit: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise engine_http.ResponseTooLarge(f"the engine's response body of {declared} bytes exceeds {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():  # decoded: a compressed body is capped as it unpacks
        size += len(chunk)
        if size > limit:
            raise engine_http.ResponseTooLarge(f"the engine's response body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def get(replica: ReplicaInfo, path: str, timeout: float) -> httpx.Response:
    headers = {"authorization": f"Bearer {replica.api_key}"} if replica.api_key else {}
    try:
        return await client().get(replica.base_url + path, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise translate(exc, replica) from exc


async def get_capped(replica: ReplicaInfo, path: str, timeout: float, limit: int) -> tuple[int, bytes]:
    """A GET's status and body, read only up to `limit` bytes (engine_response_too_large beyond):
    for answers the gateway parses off the request path, which an engine could make any size."""
    headers = {"authorization": f"Bearer {replica.api_key}"} if replica.api_key else {}
    pooled = client()
    request = pooled.build_request("GET", replica.base_url + path, headers=headers, timeout=timeout)
    try:
        response = await pooled.send(request, stream=True)
        try:
            content = await _read_capped(response, limit)
        finally:
            await response.aclose()
    except httpx.HTTPError as exc:
        raise translate(exc, replica) from exc
    return response.status_code, content


async def get_url_capped(url: str, timeout: float, limit: int) -> tuple[int, bytes]:
    """A GET of an address beside an engine (its GPU's exporter): no engine key sent, the body
    read only up to `limit` bytes, the whole exchange within `timeout` seconds (httpx's own
    timeouts bound each read, so a server dripping bytes would otherwise hold it for ever).
    Raises httpx.HTTPError (ResponseTooLarge past `limit`) or TimeoutError."""
    async def fetch() -> tuple[int, bytes]:
        pooled = client()
        response = await pooled.send(pooled.build_request("GET", url, timeout=timeout), stream=True)
        try:
            return response.status_code, await _read_capped(response, limit)
        finally:
            await response.aclose()

    return await asyncio.wait_for(fetch(), timeout)


async def post_json(url: str, payload: Mapping[str, object], timeout: float) -> httpx.Response:
    """A notification to somewhere other than an engine (alert webhooks)."""
    response = await client().post(url, json=payload, timeout=timeout)
    response.raise_for_status()
    return response


async def tokenize(replica: ReplicaInfo, body: Mapping[str, object], timeout: float) -> int | None:
    """The replica's own count of a prompt (vLLM's POST /tokenize), or None when it gives none:
    an engine without the endpoint, an error, an answer that is not a count."""
    headers = {"authorization": f"Bearer {replica.api_key}"} if replica.api_key else {}
    pooled = client()
    request = pooled.build_request("POST", replica.base_url + "/tokenize", json=body, headers=headers, timeout=timeout)
    try:
        response = await pooled.send(request, stream=True)
        try:  # its token ids too, so at most what any engine answer may be
            raw = await _read_capped(response, settings.GP_MAX_ENGINE_RESPONSE_BYTES)
        finally:
            await response.aclose()
        count = json.loads(raw).get("count") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError, RecursionError):
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None
