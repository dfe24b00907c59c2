"""The HTTP/1.1 protocol the portal runs under uvicorn: httptools's, with a deadline and a size
limit on request headers. Run uvicorn with `--http fairness.gateway.http_server:GatewayHttpProtocol`.

uvicorn's httptools protocol (0.54) has neither. Its keep-alive timer starts only when a response
ends and any byte received cancels it, so a connection that never finishes its headers (silent
from the start, or sending a byte now and then) stays open for ever; and httptools buffers a header
of any size (an 8 MB one was accepted). `--h11-max-incomplete-event-size` bounds the size under h11
only, which has no deadline either. So, for every connection:

- From the moment it opens, or a response on it ends, the next request's headers must be whole
  within GP_CLIENT_HEADER_TIMEOUT_SECONDS, or it is closed. That also bounds how long it may go on
  sending the rest of a body the app answered without reading (an early 401 or 413): uvicorn reads
  and drops such a rest to keep the connection usable, for as long as it keeps coming.
- More than about GP_CLIENT_MAX_HEADER_BYTES of request line and headers gets a 431 and the
  connection closed. (Counted from the first read after the request began: the limit may be
  overshot by one read, at most 256 KiB, which bounds the memory all the same.)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from django.conf import settings
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from fairness.gateway.errors import ApiError


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
        self._header_deadline: asyncio.TimerHandle | None = None
        self._header_bytes: int | None = None  # read since a request began, until its headers end

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._header_bytes is not None:
            self._header_bytes += len(data)
        super().data_received(data)
        too_many = self._header_bytes is not None and self._header_bytes > self.max_header_bytes
        if too_many and not self.transport.is_closing():
            self._refuse_headers()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0

    def on_headers_complete(self) -> None:
        self._header_bytes = None
        self._cancel_deadline()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # a next request whose headers are whole already
        if not pipelined:
            # Answered without reading its body (an early 401): drop what was buffered of it
            # (up to 64 KiB and a read) now, not when the connection closes.
            self.cycle.body = bytearray()
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._expect_headers()

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

    def _refuse_headers(self) -> None:
        self._header_bytes = None
        self._cancel_deadline()
        error = ApiError(
            431, f"The request's headers exceed the limit of {self.max_header_bytes} bytes.",
            "request_headers_too_large",
        )  # fmt: skip
        body = json.dumps(error.body()).encode()
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + body
        )
        self.transport.close()
