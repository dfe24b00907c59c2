"""A page refuses a body over GP_MAX_PAGE_BODY_BYTES before Django reads it: at once when the
length is declared, at the limit when it is not (Django would spool any size to disk first)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from django.conf import settings

from fairness.portal.body_limit import limit_body

BIG = 200 * 1024 * 1024


def read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection; fails after `timeout`."""
    sock.settimeout(timeout)
    received = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:  # closed with bytes of ours unread: what came before may be lost
            return received
        if not data:
            return received
        received += data
    raise AssertionError(f"the server did not close the connection within {timeout} s: {received[:200]!r}")


def test_a_declared_oversized_body_gets_413_at_once_unread(gateway):
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(
            b"POST /capacity/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            + f"Content-Length: {BIG}\r\n\r\n".encode()
        )
        # Not one byte of the body is sent: the answer cannot be waiting for it.
        response = read_until_closed(sock, timeout=5)
    assert response.startswith(b"HTTP/1.1 413 "), response[:200]
    assert b"connection: close" in response.lower()
    assert time.monotonic() - started < 5


def test_a_body_of_no_declared_length_is_read_no_further_than_the_limit(gateway):
    """Chunked, 200 MB offered: the server stops taking it near the limit and closes. What we
    manage to send beyond the limit is what the two sockets' buffers hold, a few MB at most."""
    chunk = b"x" * 65536
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(
            b"POST /capacity/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        sock.settimeout(2)  # a server that stopped reading leaves sendall blocked: that is the end
        try:
            while sent < BIG:
                sock.sendall(framed)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
        response = read_until_closed(sock, timeout=5)
    assert sent < settings.GP_MAX_PAGE_BODY_BYTES + 32 * 1024 * 1024, f"the server took {sent} bytes"
    if response:
        assert response.startswith(b"HTTP/1.1 413 "), response[:200]


# -- the wrapper on its own --------------------------------------------------------------------


def run(app, scope: dict, chunks: list[bytes]) -> tuple[list[dict], int]:
    """Drive an ASGI app with a body in `chunks`; returns what it sent and how many chunks it read."""
    sent: list[dict] = []
    read = 0

    async def receive() -> dict:
        nonlocal read
        if read < len(chunks):
            read += 1
            return {"type": "http.request", "body": chunks[read - 1], "more_body": read < len(chunks)}
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent, read


async def reading_app(scope, receive, send) -> None:
    """Like Django's handler: read the whole body (giving up on a disconnect), then answer."""
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(len(body)).encode()})


def scope(path: str = "/capacity/", headers: list[tuple[bytes, bytes]] | None = None) -> dict:
    return {"type": "http", "method": "POST", "path": path, "headers": headers or []}


@pytest.mark.parametrize(
    "path, content_type", [("/capacity/", b"text/plain"), ("/api/admin/keys", b"application/json")]
)
def test_the_wrapper_stops_reading_at_the_limit_and_answers_413(path, content_type):
    sent, read = run(limit_body(reading_app, limit=100), scope(path), [b"a" * 60] * 10)
    assert read == 2  # 120 bytes: over the limit with the second chunk, and nothing after it
    assert sent[0]["status"] == 413
    assert (b"connection", b"close") in sent[0]["headers"]
    assert dict(sent[0]["headers"])[b"content-type"].startswith(content_type)


def test_the_wrapper_answers_a_declared_length_without_calling_the_app():
    sent, read = run(limit_body(reading_app, limit=100), scope(headers=[(b"content-length", b"101")]), [b"a" * 101])
    assert read == 0
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [413]


def test_the_wrapper_passes_a_body_within_the_limit():
    sent, _ = run(limit_body(reading_app, limit=100), scope(headers=[(b"content-length", b"100")]), [b"a" * 50] * 2)
    assert sent[0]["status"] == 200 and sent[1]["body"] == b"100"
