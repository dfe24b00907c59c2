"""A lean ASGI front for /v1/: the proxy views without Django's request cycle.

Django's ASGI handler wraps every request in a thread-sensitive context and runs the
request_started / request_finished signals and response.close() through sync_to_async, which
means a fresh worker thread and several thread hops per request. None of that serves the
proxy: it has no middleware, sessions or templates, and its own code is async. So /v1/ gets this
small adapter instead: it reads the body (stopping at the size limit), calls the view, sends the
response, and cancels the view when the client disconnects, as Django does.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, HttpResponseBase

from fairness.gateway import views
from fairness.gateway.errors import ApiError

log = logging.getLogger(__name__)

View = Callable[[Any], Awaitable[HttpResponseBase]]
ROUTES: dict[str, View] = {
    "/v1/chat/completions": views.chat_completions,
    "/v1/completions": views.completions,
    "/v1/models": views.models,
}


class _TooLarge(Exception):
    pass


async def _read_body(receive: Callable[[], Awaitable[dict]]) -> bytes | None:
    """The whole body, None if the client left first; _TooLarge past the limit."""
    limit = settings.GP_MAX_BODY_BYTES
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send_response(response: HttpResponseBase, send: Callable[[dict], Awaitable[None]]) -> None:
    headers = [(name.lower().encode("latin-1"), str(value).encode("latin-1")) for name, value in response.items()]
    if not response.streaming:
        assert isinstance(response, HttpResponse)
        body = response.content
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    try:
        async for chunk in response.streaming_content:  # type: ignore[attr-defined]
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body"})
    finally:
        response.close()  # the relay's cleanup, should iteration not have finished it


async def _until_disconnect(receive: Callable[[], Awaitable[dict]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def app(scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable[None]]) -> None:
    view = ROUTES.get(scope["path"].rstrip("/") or "/")
    try:
        body = await _read_body(receive)
    except _TooLarge:
        error = ApiError(413, f"The request body exceeds the limit of {settings.GP_MAX_BODY_BYTES} bytes.",
                         "request_too_large")
        await _send_response(error.response({"X-Request-Id": "req-" + uuid.uuid4().hex}), send)
        return
    if body is None:
        return  # gone before we could answer
    if view is None:
        error = ApiError(404, f"Unknown endpoint {scope['path']}.", "unknown_url")
        await _send_response(error.response({"X-Request-Id": "req-" + uuid.uuid4().hex}), send)
        return
    request = ASGIRequest(scope, io.BytesIO(body))

    async def respond() -> None:
        response = await view(request)
        await _send_response(response, send)

    answering = asyncio.ensure_future(respond())
    watching = asyncio.ensure_future(_until_disconnect(receive))
    try:
        await asyncio.wait({answering, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (answering, watching):
            if not task.done():
                task.cancel()  # a client that left cancels its request; the view cleans up
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await task
                except Exception:
                    log.exception("proxy request failed")
