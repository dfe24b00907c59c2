"""Routes whose view reads the request body itself, chunk by chunk, as it arrives.

The /v1/ adapter reads a chat request's body whole before the view runs, under GP_MAX_BODY_BYTES.
An upload of hundreds of MiB must never be held like that: a streamed route's view gets the body
as a BodyStream instead, under the route's own limit. The adapter's pump (BodyStream.pump) reads
the server's messages and hands the body over through a small queue, so a view that writes
slowly slows the client down (the server stops reading the socket) rather than filling memory;
once the body has ended, the pump goes on waiting for the client to leave, as the adapter's
watcher does for other routes, and the view is cancelled when it does.

Routes are added from above (gpuportal/asgi.py): the packages that own them sit over the gateway.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.http import HttpResponseBase

from fairness.gateway.api_keys import KeyInfo
from fairness.gateway.errors import ApiError
from fairness.gateway.runtime import GatewayRuntime
from fairness.scheduling.directory import ReplicaDirectory

Receive = Callable[[], Awaitable[dict[str, Any]]]
QUEUE_DEPTH = 4  # chunks between the pump and the view: the memory a slow view may cost


class BodyTimedOut(Exception):
    """The body stopped arriving: no part of it within the body timeout."""


def too_large(limit: int) -> ApiError:
    return ApiError(
        413, f"The request body is larger than the limit of {mebibytes(limit)}; send a smaller one.",
        "request_too_large",
    )


def mebibytes(size: int) -> str:
    """A byte count in MiB, as people read it: 4 MiB, 0.5 MiB, 1.25 MiB."""
    return f"{round(size / 1048576, 2):g} MiB"


class BodyStream:
    """The body of one request, as it arrives; iterate it once (`async for chunk in body`).

    Iteration raises ApiError 413 as soon as the body crosses `limit`, and BodyTimedOut when no
    chunk comes within `idle_timeout` (a gap, not the whole body: a large upload on a slow link
    takes as long as it takes, as long as it keeps coming)."""

    def __init__(self, receive: Receive, limit: int, idle_timeout: float) -> None:
        self.limit = limit
        self.idle_timeout = idle_timeout
        self.received = 0
        self._receive = receive
        self._chunks: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_DEPTH)  # None: the end

    async def pump(self) -> None:
        """Hand the body to the view, then wait for the client to leave (the adapter's watcher)."""
        ended = False
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                return
            if not ended:
                await self._chunks.put(message.get("body", b""))
                if not message.get("more_body", False):
                    ended = True
                    await self._chunks.put(None)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        while True:
            try:
                async with asyncio.timeout(self.idle_timeout):
                    chunk = await self._chunks.get()
            except TimeoutError:
                raise BodyTimedOut from None
            if chunk is None:
                return
            self.received += len(chunk)
            if self.received > self.limit:
                raise too_large(self.limit)
            if chunk:
                yield chunk


@dataclass(frozen=True)
class StreamedRequest:
    """One request to a streamed route: its key valid (checked from the headers before any of the
    body was read), its body still to come."""

    method: str
    path: str
    query_string: str
    headers: Mapping[str, str]  # names in lower case
    body: BodyStream
    request_id: str
    key: KeyInfo
    directory: ReplicaDirectory


StreamedView = Callable[[StreamedRequest, GatewayRuntime], Awaitable[HttpResponseBase]]


@dataclass(frozen=True)
class StreamedRoute:
    view: StreamedView
    max_body_bytes: int  # a longer body gets 413 (at once when its declared length says so)


def find_route(routes: Mapping[str, StreamedRoute], path: str) -> StreamedRoute | None:
    """The route for `path`: an exact match, else the longest key ending in "/" that it extends."""
    found = routes.get(path.rstrip("/") or "/")
    if found is not None:
        return found
    prefixes = [prefix for prefix in routes if prefix.endswith("/") and path.startswith(prefix) and path != prefix]
    return routes[max(prefixes, key=len)] if prefixes else None
