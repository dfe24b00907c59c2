"""Plain HTTP calls to a live gateway's /v1/, and the OpenAI-shaped error every refusal there
must be (the right status, four fields, no traceback, a request id)."""

from __future__ import annotations

import json
import socket

import httpx

from tests.support.cast import MODEL

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def post(gateway, secret: str | None, body, path="/v1/chat/completions", **kwargs) -> httpx.Response:
    headers = {"authorization": f"Bearer {secret}"} if secret else {}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(gateway.url + path, content=content, headers=headers, timeout=30, **kwargs)


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "Traceback" not in error["message"]
    if code is not None:
        assert error["code"] == code
    assert response.headers["x-request-id"].startswith("req-")
    return error


def hanging_chat(gateway, secret: str, headers: dict[str, str] | None = None) -> socket.socket:
    """A chat sent over a socket of its own, its answer never read: with the engine stalled, it
    holds its slot until the socket is shut (shutdown, which a blocked reader's close is not)."""
    body = json.dumps(CHAT).encode()
    extra = b"".join(f"\r\n{name}: {value}".encode() for name, value in (headers or {}).items())
    conn = socket.create_connection(("127.0.0.1", gateway.port), timeout=60)
    conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret.encode()
                 + extra + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                 + b"\r\n\r\n" + body)
    return conn
