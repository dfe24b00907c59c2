"""Request bodies above a limit are refused before Django reads them (ASGI, around the pages).

Django's ASGI handler reads a whole body before any view runs, spooling what does not fit in
memory to a temporary file, so an anonymous 200 MB POST to a public page costs 200 MB of disk
before the 403; DATA_UPLOAD_MAX_MEMORY_SIZE is checked only later, when a view reads the form.
Here a declared Content-Length over the limit is answered 413 at once with the body unread, and
a body that turns out longer (chunked, with no length) stops being read at the limit: Django
sees the client gone and answers nothing, and we answer 413. Either way the connection is
closed, so the server reads no more of it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(scope: Scope, send: Send, limit: int) -> None:
    message = f"The request body is larger than {limit} bytes."
    if scope["path"].startswith("/api/"):
        body, content_type = json.dumps({"detail": message}).encode(), b"application/json"
    else:
        body, content_type = message.encode() + b"\n", b"text/plain; charset=utf-8"
    await send({
        "type": "http.response.start",
        "status": 413,
        "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close")],
    })
    await send({"type": "http.response.body", "body": body})


def limit_body(app: ASGIApp, limit: int) -> ASGIApp:
    """`app` with HTTP request bodies over `limit` bytes refused (413) before it reads them."""

    async def limited(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            return await _refuse(scope, send, limit)
        received = 0
        over = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, over
            if over:  # the app listens for a disconnect after the body: it has one
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await app(scope, counting_receive, watching_send)
        if over and not started:
            await _refuse(scope, send, limit)

    return limited
