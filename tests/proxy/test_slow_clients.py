"""Clients that send slowly, stall, or send too much in headers cost the gateway little: a request
without a valid key is answered before its body is read, a stalled body gets 408, headers must be
whole within a deadline and below a size, and the connections of such clients are closed."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from fairness.actions.keys import mint_secret
from fairness.models import ApiKey
from tests.support.processes import start_gateway

HEADER_TIMEOUT = 1.0
IDLE_TIMEOUT = 3
BODY_TIMEOUT = 0.5
MAX_BODY = settings.GP_MAX_BODY_BYTES


@pytest.fixture(scope="module")
def strict_session(live_db_url):
    """A gateway with short client deadlines, of its own so its memory is this module's alone."""
    process = start_gateway(
        live_db_url, name="strict", GP_CLIENT_HEADER_TIMEOUT_SECONDS=str(HEADER_TIMEOUT),
        GP_CLIENT_IDLE_TIMEOUT_SECONDS=str(IDLE_TIMEOUT), GP_CLIENT_BODY_TIMEOUT_SECONDS=str(BODY_TIMEOUT),
    )
    yield process
    process.stop()


@pytest.fixture
def strict(strict_session, transactional_db, redis_url):
    return strict_session


def head(port: int, *, authorization: str | None = None, content_length: int | None = None,
         method: str = "POST", path: str = "/v1/chat/completions", extra: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"host: 127.0.0.1:{port}", "content-type: application/json"]
    if authorization is not None:
        lines.append(f"authorization: {authorization}")
    if content_length is not None:
        lines.append(f"content-length: {content_length}")
    return "\r\n".join(lines).encode() + b"\r\n" + extra + b"\r\n"


def connect(gateway, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=timeout)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-case names) and its content-length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed before a response: {data!r}")
        data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (h.partition(":") for h in header_lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(status_line.split()[1]), headers, body


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """True once the server has closed the connection, False if it is still open `within` s on."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


def error_code(body: bytes) -> str:
    return json.loads(body)["error"]["code"]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize(
    ("key", "code"),
    [("none", "missing_api_key"), ("malformed", "invalid_api_key"), ("unknown", "invalid_api_key"),
     ("revoked", "revoked_api_key")],
)
def test_a_request_without_a_valid_key_is_answered_before_its_body_is_sent(gateway, cast, key, code):
    if key == "revoked":
        ApiKey.objects.get(pk=cast["alice"].key_id).revoke()
    authorization = {"none": None, "malformed": "Bearer nope", "unknown": f"Bearer {mint_secret()}",
                     "revoked": f"Bearer {cast['alice'].secret}"}[key]
    with connect(gateway, timeout=5) as sock:
        sock.sendall(head(gateway.port, authorization=authorization, content_length=MAX_BODY))
        status, headers, body = read_response(sock)  # not one byte of the body sent
    assert (status, error_code(body)) == (401, code)
    assert headers["x-request-id"].startswith("req-")


def test_stalled_bodies_without_a_key_cost_the_gateway_no_memory_and_are_closed(strict):
    for _ in range(3):  # warm up every code path the stalled requests take
        httpx.post(strict.url + "/v1/chat/completions", content=b"x" * 100_000, timeout=10)
    idle = rss_kib(strict.process.pid)

    def stall(_: int) -> tuple[socket.socket, int, str]:
        sock = connect(strict)
        # All but the last byte of a body at the size limit; then nothing more.
        sock.sendall(head(strict.port, content_length=MAX_BODY) + b"x" * (MAX_BODY - 1))
        status, _, body = read_response(sock)
        return sock, status, error_code(body)

    with ThreadPoolExecutor(50) as pool:
        stalled = list(pool.map(stall, range(50)))
    try:
        loaded = rss_kib(strict.process.pid)
        assert {(status, code) for _, status, code in stalled} == {(401, "missing_api_key")}
        assert loaded <= idle * 1.10, f"RSS {idle} KiB idle, {loaded} KiB with 50 stalled bodies"
        # Their connections do not stay open: nothing follows within the header timeout.
        assert all(closed_by_server(sock, within=HEADER_TIMEOUT + 4) for sock, _, _ in stalled)
    finally:
        for sock, _, _ in stalled:
            sock.close()


def test_a_stalled_body_with_a_valid_key_gets_408_and_the_connection_closed(strict, cast):
    with connect(strict) as sock:
        sock.sendall(head(strict.port, authorization=f"Bearer {cast['alice'].secret}", content_length=1000)
                     + b'{"model": "sim", ')
        started = time.monotonic()
        status, headers, body = read_response(sock)
        waited = time.monotonic() - started
        assert (status, error_code(body)) == (408, "request_timeout")
        assert json.loads(body)["error"]["type"] == "invalid_request_error"
        assert headers["connection"] == "close"
        assert BODY_TIMEOUT * 0.9 <= waited < BODY_TIMEOUT + 3
        assert closed_by_server(sock, within=3)


def test_a_silent_connection_is_closed_after_the_header_timeout(strict):
    with connect(strict) as sock:
        assert closed_by_server(sock, within=HEADER_TIMEOUT + 4)


def test_headers_that_trickle_in_are_cut_off_at_the_header_timeout(strict, cast):
    with connect(strict) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        deadline = time.monotonic() + HEADER_TIMEOUT + 4
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                sock.sendall(b"x-slow: y\r\n")  # a header line every 0.2 s, never the blank line
            except (ConnectionResetError, BrokenPipeError):
                closed = True
            else:
                closed = closed_by_server(sock, within=0.2)
        assert closed, "a connection whose headers never end is still open"


def test_an_idle_connection_outlives_the_header_timeout_and_closes_at_the_idle_timeout(strict, cast):
    models = head(strict.port, authorization=f"Bearer {cast['alice'].secret}", method="GET", path="/v1/models")
    with connect(strict) as sock:
        sock.sendall(models)
        assert read_response(sock)[0] == 200
        # A client that keeps idle connections for less than the idle timeout may reuse this one.
        assert not closed_by_server(sock, within=HEADER_TIMEOUT + 0.5)
        sock.sendall(models)
        assert read_response(sock)[0] == 200
        answered = time.monotonic()
        assert closed_by_server(sock, within=IDLE_TIMEOUT + 4)
        assert time.monotonic() - answered >= IDLE_TIMEOUT * 0.9


def test_a_request_begun_on_an_idle_connection_has_the_header_timeout_from_its_first_byte(strict, cast):
    with connect(strict) as sock:
        sock.sendall(head(strict.port, authorization=f"Bearer {cast['alice'].secret}", method="GET",
                          path="/v1/models"))
        assert read_response(sock)[0] == 200
        sock.sendall(b"GET /v1/models HTTP/1.1\r\n")  # and never the rest
        begun = time.monotonic()
        assert closed_by_server(sock, within=HEADER_TIMEOUT + 4)
        assert time.monotonic() - begun < IDLE_TIMEOUT


def test_the_idle_timeout_outlasts_the_common_clients_keep_alive():
    # Equal timeouts race: a client reusing a connection as the server closes it loses the request.
    assert httpx.Limits().keepalive_expiry < settings.GP_CLIENT_IDLE_TIMEOUT_SECONDS  # the openai SDK's
    assert settings.GP_CLIENT_IDLE_TIMEOUT_SECONDS > 60  # nginx's upstream keepalive_timeout, AWS ALB's idle


def test_oversized_headers_get_431_and_headers_below_the_limit_are_served(strict, cast):
    authorization = f"Bearer {cast['alice'].secret}"
    fine = head(strict.port, authorization=authorization, method="GET", path="/v1/models",
                extra=b"x-padding: " + b"p" * 50_000 + b"\r\n")
    with connect(strict) as sock:
        sock.sendall(fine)
        assert read_response(sock)[0] == 200

    huge = head(strict.port, authorization=authorization, method="GET", path="/v1/models",
                extra=b"x-padding: " + b"p" * (2 * 1024 * 1024) + b"\r\n")
    with connect(strict) as sock:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # refused part way through
            sock.sendall(huge)
        status, headers, body = read_response(sock)
    assert (status, error_code(body)) == (431, "request_headers_too_large")
    assert headers["connection"] == "close"
