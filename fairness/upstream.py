"""The one outbound-HTTP seam: a pooled httpx client per event loop, and error mapping."""

from __future__ import annotations

import asyncio
import weakref

import httpx
from django.conf import settings

from fairness.errors import ApiError
from fairness.replicas import ReplicaInfo

_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient]" = (
    weakref.WeakKeyDictionary()
)


def client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    existing = _clients.get(loop)
    if existing is None:
        existing = httpx.AsyncClient(
            timeout=httpx.Timeout(
                connect=settings.GP_UPSTREAM_CONNECT_TIMEOUT,
                read=settings.GP_UPSTREAM_READ_TIMEOUT,
                write=30.0,
                pool=settings.GP_UPSTREAM_CONNECT_TIMEOUT,
            ),
            limits=httpx.Limits(max_connections=2048, max_keepalive_connections=512),
            # The engine speaks plain HTTP/1.1 on a trusted network; no env proxies.
            trust_env=False,
        )
        _clients[loop] = existing
    return existing


def translate(exc: httpx.HTTPError, replica: ReplicaInfo) -> ApiError:
    """An httpx failure as the error the client should see."""
    if isinstance(exc, httpx.TimeoutException):
        return ApiError(504, f"The engine ({replica.name}) did not answer in time.", "upstream_timeout")
    return ApiError(502, f"The engine ({replica.name}) is unreachable.", "upstream_unreachable")


async def open_stream(
    replica: ReplicaInfo, path: str, body: bytes, request_id: str
) -> httpx.Response:
    """POST to the replica and return once the response headers are in; the body streams."""
    headers = {"content-type": "application/json", "x-request-id": request_id}
    if replica.api_key:
        headers["authorization"] = f"Bearer {replica.api_key}"
    request = client().build_request("POST", replica.base_url + path, content=body, headers=headers)
    try:
        return await client().send(request, stream=True)
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
        # A pooled keep-alive connection to an engine that has since restarted fails like this
        # before any answer; the engine aborts whatever it got, so one fresh try is safe.
        pass
    except httpx.HTTPError as exc:
        raise translate(exc, replica) from exc
    try:
        return await client().send(request, stream=True)
    except httpx.HTTPError as exc:
        raise translate(exc, replica) from exc


async def get(replica: ReplicaInfo, path: str, timeout: float) -> httpx.Response:
    headers = {"authorization": f"Bearer {replica.api_key}"} if replica.api_key else {}
    try:
        return await client().get(replica.base_url + path, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise translate(exc, replica) from exc


async def post_json(url: str, payload: dict, timeout: float) -> httpx.Response:
    """A notification to somewhere other than an engine (alert webhooks)."""
    response = await client().post(url, json=payload, timeout=timeout)
    response.raise_for_status()
    return response
