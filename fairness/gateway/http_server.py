"""The HTTP/1.1 protocol the portal runs under uvicorn: httptools's, with deadlines on request
headers and bodies, a size limit on headers, and a concurrency limit that counts requests served,
not connections. Run uvicorn with `--http fairness.gateway.http_server:GatewayHttpProtocol`.

uvicorn's httptools protocol (0.54) has none of these. Its keep-alive timer starts only when a
response ends and any byte received cancels it, so a connection that never finishes its headers
(silent from the start, or sending a byte now and then) stays open for ever; nothing bounds how
long a body may take; httptools buffers a header of any size (an 8 MB one was accepted); and
`--limit-concurrency` counts open connections, so enough idle or trickling ones make every real
request get 503. So, for every connection:

- From the moment it opens, or the first byte of a next request arrives, that request's headers
  must be whole within GP_CLIENT_HEADER_TIMEOUT_SECONDS, or it is closed. That also bounds how
  long it may go on sending the rest of a body the app answered without reading (an early 401 or
  413): uvicorn reads and drops such a rest to keep the connection usable, for as long as it comes.
- Once a request's headers are whole, its body must keep up an average pace: all of it within
  GP_CLIENT_BODY_GRACE_SECONDS plus one second for every GP_CLIENT_MIN_BODY_BYTES_PER_SECOND
  received, or the request gets 408 and the connection is closed. (Not counted: time the server
  itself stopped reading because the app was behind.) A gap limit alone would let one byte every
  few seconds hold a connection for as long as the body is long.
- Idle between requests (a response ended, not a byte of the next yet), it is closed after
  GP_CLIENT_IDLE_TIMEOUT_SECONDS, which takes the place of `--timeout-keep-alive`: longer than
  clients keep an idle connection, so they never send on one the server is closing.
- More than about GP_CLIENT_MAX_HEADER_BYTES of request line and headers gets a 431 and the
  connection closed. (Counted from the first read after the request began: the limit may be
  overshot by one read, at most 256 KiB, which bounds the memory all the same.)
- Connections waiting on their client are capped per address and in total, the oldest closed past
  a cap, and `--limit-concurrency` counts only requests that arrived whole, or whose key the app
  found valid before their body (`vouch_for`; fairness/gateway/waiting_clients.py).

And a response's head goes out with its first body bytes, in one send (HeadJoiningTransport).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from fairness.gateway.api_paths import is_api_path
from fairness.gateway.errors import ApiError
from fairness.gateway.process_counts import PROCESS_COUNTS
from fairness.gateway.waiting_clients import WaitingClients

# How long after a burst of connections the oldest waiting past a cap are closed: long enough for
# the loop to read what came with the burst (waiting_clients.py).
CLOSING_DELAY_SECONDS = 0.05
VOUCHING = "gpuportal.vouching"  # the scope's extension through which the app vouches for a request
ANSWERED_HERE = "gpuportal.answered"  # the scope's extension set when the server itself answered
_CLIENTS: weakref.WeakKeyDictionary[ServerState, WaitingClients] = weakref.WeakKeyDictionary()


def clients_of(server_state: ServerState) -> WaitingClients:
    """The one count of waiting and served connections of a server (all its protocols share it)."""
    clients = _CLIENTS.get(server_state)
    if clients is None:
        clients = WaitingClients(settings.GP_CLIENT_MAX_PENDING, settings.GP_CLIENT_MAX_PENDING_PER_ADDRESS)
        _CLIENTS[server_state] = clients
    return clients


def vouch_for(scope: Mapping[str, Any]) -> None:
    """Tell the server that the sender of this request is known (its key is valid): while its
    body arrives, its connection is served rather than waiting, and no flood of waiting
    connections from its address closes it. Its body must keep the pace all the same."""
    vouch = scope.get("extensions", {}).get(VOUCHING, {}).get("vouch")
    if vouch is not None:
        vouch()


@dataclass
class BodyPace:
    """When a body that began arriving at `started` must be whole, given what has come of it."""

    started: float
    grace: float
    min_rate: float  # bytes a second, on average
    received: int = 0

    def due(self) -> float:
        return self.started + self.grace + self.received / self.min_rate

    def restart(self, now: float) -> None:
        """Count afresh from `now`: the server stopped reading, so the pace so far is not the client's."""
        self.started, self.received = now, 0


class GatewayHttpProtocol(HttpToolsProtocol):
    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.header_timeout: float = settings.GP_CLIENT_HEADER_TIMEOUT_SECONDS
        self.max_header_bytes: int = settings.GP_CLIENT_MAX_HEADER_BYTES
        self.body_grace: float = settings.GP_CLIENT_BODY_GRACE_SECONDS
        self.min_body_rate: float = settings.GP_CLIENT_MIN_BODY_BYTES_PER_SECOND
        self.timeout_keep_alive = settings.GP_CLIENT_IDLE_TIMEOUT_SECONDS  # uvicorn's idle timer
        # uvicorn's own check counts every connection; ours counts requests served.
        self.max_serving = self.limit_concurrency
        self.limit_concurrency = None
        self.clients = clients_of(server_state)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._header_bytes: int | None = None  # read since a request began, until its headers end
        self._body_deadline: asyncio.TimerHandle | None = None
        self._pace: BodyPace | None = None  # of the body being read, until it ends
        self._whole = False  # the latest request has arrived whole, body and all
        self._idle = False  # a response ended and nothing has come since: uvicorn's idle timer runs
        self._vouching = {"vouch": self._vouched}  # each request's scope extension (vouch_for)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_headers()
        self._wait_on_client()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        self._end_body_pace()
        self.clients.forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._idle:  # the next request has begun: its headers are due from now
            self._idle = False
            self._expect_headers()
        if self._header_bytes is not None:
            self._header_bytes += len(data)
        super().data_received(data)
        too_many = self._header_bytes is not None and self._header_bytes > self.max_header_bytes
        if too_many and not self.transport.is_closing():
            self._refuse_headers()
        elif self._pace is not None and self._body_deadline is None:
            # A body still to come. (Most requests arrive whole in one read: they need no timer.)
            self._body_deadline = self.loop.call_at(self._pace.due(), self._check_body_pace)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        self._whole = False

    def on_headers_complete(self) -> None:
        self._header_bytes = None
        self._cancel_deadline()
        self._pace = BodyPace(self.loop.time(), self.body_grace, self.min_body_rate)
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
        extensions[VOUCHING] = self._vouching
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycle.transport = HeadJoiningTransport(self.transport, self.loop)  # type: ignore[assignment]

    def on_body(self, body: bytes) -> None:
        if self._pace is not None:
            self._pace.received += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._whole = True
        self._end_body_pace()
        if self.cycle is not None and not self.cycle.response_complete:
            self.clients.serve(self)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # a next request whose headers are whole already
        if not pipelined:
            # Answered without reading its body (an early 401): drop what was buffered of it
            # (up to 64 KiB and a read) now, not when the connection closes.
            self.cycle.body = bytearray()
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if not pipelined or not self._whole:
            self._wait_on_client()
        if not pipelined:
            self._idle = True

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        others = self.clients.serving - self.clients.is_serving(self)
        if self.max_serving is not None and others >= self.max_serving:
            app = _over_capacity
        super()._start_asgi_task(cycle, app)

    def _vouched(self) -> None:
        if self._pace is not None and not self.transport.is_closing():  # its body is still to come
            self.clients.serve(self)

    def close_waiting(self) -> None:
        """Closed as the oldest connection waiting on its client past a cap."""
        if not self.transport.is_closing():
            self.transport.close()

    def _wait_on_client(self) -> None:
        self.clients.wait(self, self.client[0] if self.client else "")
        if self.clients.past_cap() and not self.clients.closing_scheduled:
            self.clients.closing_scheduled = True
            self.loop.call_later(CLOSING_DELAY_SECONDS, self._close_past_caps)

    def _close_past_caps(self) -> None:
        self.clients.closing_scheduled = False
        self.clients.close_past_caps()

    def _expect_headers(self) -> None:
        self._cancel_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout, self._headers_timed_out)

    def _cancel_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_timed_out(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _end_body_pace(self) -> None:
        self._pace = None
        if self._body_deadline is not None:
            self._body_deadline.cancel()
            self._body_deadline = None

    def _check_body_pace(self) -> None:
        self._body_deadline = None
        pace = self._pace
        if pace is None or self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow.read_paused:
            pace.restart(now)  # the app has not taken what came: the client is not the slow one
        if now < pace.due():
            self._body_deadline = self.loop.call_at(pace.due(), self._check_body_pace)
            return
        self._pace = None
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            self._answer_and_close(408, _body_too_slow(cycle.scope["path"], self.min_body_rate))
            extensions: dict[str, Any] = cycle.scope.setdefault("extensions", {})
            extensions[ANSWERED_HERE] = {}  # counted here: the app, seeing the client gone, is not to count it
            # As connection_lost will: the app sees the client gone and its answer goes nowhere.
            cycle.disconnected = True
            cycle.message_event.set()
        else:
            self.transport.close()

    def _refuse_headers(self) -> None:
        self._header_bytes = None
        self._cancel_deadline()
        error = ApiError(
            431, f"The request's headers exceed the limit of {self.max_header_bytes} bytes.",
            "request_headers_too_large",
        )
        self._answer_and_close(431, (b"application/json", json.dumps(error.body()).encode()))

    def _answer_and_close(self, status: int, content: tuple[bytes, bytes]) -> None:
        content_type, body = content
        self.transport.write(
            STATUS_LINE[status] + b"content-type: " + content_type + b"\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + body
        )
        self.transport.close()


class HeadJoiningTransport:
    """A response's view of its connection, which sends the response's head together with the
    first bytes after it. uvicorn writes the status line and headers as soon as the app starts
    the response, and the body in a write of its own, so a whole answer costs two sends and wakes
    its client twice. Here the head waits for the next write, or at the latest for the end of the
    event loop's current pass (a stream's first chunk may be a long way off): the client sees the
    same bytes in the same order, in one send where the body follows at once."""

    __slots__ = ("_transport", "_loop", "_head", "_written")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None
        self._written = False

    def write(self, data: bytes) -> None:
        if not self._written:  # the first write: the head (or a 100 Continue), held
            self._written = True
            self._head = data
            self._loop.call_soon(self._flush)
            return
        head = self._head
        if head is None:
            self._transport.write(data)
        else:
            self._head = None
            self._transport.writelines((head, data))  # one send of both, the body not copied

    def _flush(self) -> None:
        head, self._head = self._head, None
        if head is not None and not self._transport.is_closing():
            self._transport.write(head)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._flush()
        self._transport.close()


def _body_too_slow(path: str, min_rate: float) -> tuple[bytes, bytes]:
    """The 408 for a body below the pace: OpenAI-shaped for /v1/, plain text for the pages."""
    message = f"The request body arrived slower than {min_rate:g} bytes a second."
    return _error_content(path, _counted(path, ApiError(408, message, "request_timeout")))


def _counted(path: str, error: ApiError) -> ApiError:
    """An API answer given here, which the app never sends, counted as the app counts its own."""
    if is_api_path(path):
        PROCESS_COUNTS.count(error.status, error.code)
    return error


def _error_content(path: str, error: ApiError) -> tuple[bytes, bytes]:
    if is_api_path(path):
        return b"application/json", json.dumps(error.body()).encode()
    return b"text/plain; charset=utf-8", error.message.encode() + b"\n"


async def _over_capacity(scope: Any, receive: Any, send: Any) -> None:
    """The answer past the limit on requests served: 503, to retry in a second."""
    error = ApiError(503, "The gateway is serving as many requests as it may; try again.", "server_busy")
    content_type, body = _error_content(scope["path"], _counted(scope["path"], error))
    await send({
        "type": "http.response.start", "status": 503,
        "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                    (b"retry-after", b"1"), (b"connection", b"close")],
    })
    await send({"type": "http.response.body", "body": body})
