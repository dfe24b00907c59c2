"""The one outbound-HTTP seam: a pooled httpx client per event loop, and error mapping."""

from __future__ import annotations

import asyncio
import itertools
import weakref

import httpx
from django.conf import settings

from fairness.errors import ApiError
from fairness.replicas import ReplicaInfo

# httpcore scans every pooled connection of a client on each request and each response close
# (an idle one costs a readiness syscall, and its idle count is recomputed per connection), so a
# single pool of N connections costs O(N) to O(N²) per request at high concurrency. Requests are
# spread over a few small pools instead.
LANES = 8
_lanes: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Lanes]" = weakref.WeakKeyDictionary()


class _Lanes:
    def __init__(self) -> None:
        timeout = httpx.Timeout(
            connect=settings.GP_UPSTREAM_CONNECT_TIMEOUT,
            read=settings.GP_UPSTREAM_READ_TIMEOUT,
            write=30.0,
            pool=settings.GP_UPSTREAM_CONNECT_TIMEOUT,
        )
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        # The engine speaks plain HTTP/1.1 on a trusted network; no env proxies.
        self.clients = [httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False) for _ in range(LANES)]
        self._turn = itertools.cycle(self.clients)

    def next(self) -> httpx.AsyncClient:
        return next(self._turn)


def _of_loop() -> _Lanes:
    loop = asyncio.get_running_loop()
    lanes = _lanes.get(loop)
    if lanes is None:
        lanes = _lanes[loop] = _Lanes()
    return lanes


def client() -> httpx.AsyncClient:
    """A pooled client of the running loop (a client must not cross loops)."""
    return _of_loop().next()


async def aclose() -> None:
    """Close the running loop's clients (their connections belong to this loop)."""
    lanes = _lanes.pop(asyncio.get_running_loop(), None)
    if lanes is not None:
        for each in lanes.clients:
            await each.aclose()


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
    lane = client()
    request = lane.build_request("POST", replica.base_url + path, content=body, headers=headers)
    try:
        return await lane.send(request, stream=True)
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
        # A pooled keep-alive connection to an engine that has since restarted fails like this
        # before any answer; the engine aborts whatever it got, so one fresh try is safe.
        pass
    except httpx.HTTPError as exc:
        raise translate(exc, replica) from exc
    try:
        return await lane.send(request, stream=True)
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
