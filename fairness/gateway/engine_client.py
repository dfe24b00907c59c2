"""The one outbound-HTTP seam: proxied requests on the lean engine client, everything else (TLS
engines, probes, scrapes, webhooks) on a pooled httpx client per event loop; error mapping."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping

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


async def aclose() -> None:
    """Close the running loop's clients (their connections belong to this loop)."""
    engine_http.close_pool()
    pooled = _clients.pop(asyncio.get_running_loop(), None)
    if pooled is not None:
        await pooled.aclose()


def translate(exc: httpx.HTTPError, replica: ReplicaInfo) -> ApiError:
    """An httpx failure as the error the client should see."""
    if isinstance(exc, httpx.TimeoutException):
        return ApiError(504, f"The engine ({replica.name}) did not answer in time.", "upstream_timeout")
    return ApiError(502, f"The engine ({replica.name}) is unreachable.", "upstream_unreachable")


async def open_stream(replica: ReplicaInfo, path: str, body: bytes, request_id: str) -> EngineAnswer:
    """POST to the replica and return once the response headers are in; the body streams.

    Plain-HTTP engines (the usual case: the same host or a private network) go through the lean
    client; an engine behind TLS through httpx.
    """
    headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
    if replica.api_key:
        headers["Authorization"] = f"Bearer {replica.api_key}"
    try:
        if replica.base_url.startswith("http://"):
            return await engine_http.post(
                replica.base_url, path, body, headers,
                connect_timeout=settings.GP_UPSTREAM_CONNECT_TIMEOUT,
                read_timeout=settings.GP_UPSTREAM_READ_TIMEOUT,
            )
        pooled = client()
        request = pooled.build_request("POST", replica.base_url + path, content=body, headers=headers)
        return await pooled.send(request, stream=True)
    except httpx.HTTPError as exc:
        raise translate(exc, replica) from exc


async def get(replica: ReplicaInfo, path: str, timeout: float) -> httpx.Response:
    headers = {"authorization": f"Bearer {replica.api_key}"} if replica.api_key else {}
    try:
        return await client().get(replica.base_url + path, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise translate(exc, replica) from exc


async def post_json(url: str, payload: Mapping[str, object], timeout: float) -> httpx.Response:
    """A notification to somewhere other than an engine (alert webhooks)."""
    response = await client().post(url, json=payload, timeout=timeout)
    response.raise_for_status()
    return response
