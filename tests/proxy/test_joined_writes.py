"""A response's head leaves with its first body bytes in one send, and a stream's head still
leaves at once: HeadJoiningTransport alone, then under the gateway's HTTP protocol on a socket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from fairness.gateway.http_server import GatewayHttpProtocol, HeadJoiningTransport


class RecordingTransport:
    """What was sent, one entry per send."""

    def __init__(self) -> None:
        self.sends: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sends.append(bytes(data))

    def writelines(self, pieces: Any) -> None:
        self.sends.append(b"".join(pieces))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def one_pass() -> None:
    """Let the loop finish the pass it is in (what call_soon scheduled runs)."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def test_a_whole_answer_goes_out_in_one_send():
    async def go() -> list[bytes]:
        sent = RecordingTransport()
        joined = HeadJoiningTransport(sent, asyncio.get_running_loop())  # type: ignore[arg-type]
        joined.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        joined.write(b"{}")
        await one_pass()
        return sent.sends

    assert asyncio.run(go()) == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]


def test_a_head_with_nothing_after_it_goes_out_at_the_end_of_the_loops_pass_and_the_rest_as_it_comes():
    async def go() -> tuple[list[bytes], list[bytes]]:
        sent = RecordingTransport()
        joined = HeadJoiningTransport(sent, asyncio.get_running_loop())  # type: ignore[arg-type]
        joined.write(b"head")
        held = list(sent.sends)
        await one_pass()
        joined.write(b"chunk 1")
        joined.write(b"chunk 2")
        return held, sent.sends

    held, sent = asyncio.run(go())
    assert held == []  # nothing yet in the pass that wrote it
    assert sent == [b"head", b"chunk 1", b"chunk 2"]


def test_closing_sends_a_held_head_first_and_a_closed_connection_gets_nothing_more():
    async def go() -> tuple[list[bytes], list[bytes]]:
        first = RecordingTransport()
        joined = HeadJoiningTransport(first, asyncio.get_running_loop())  # type: ignore[arg-type]
        joined.write(b"head")
        joined.close()
        second = RecordingTransport()
        gone = HeadJoiningTransport(second, asyncio.get_running_loop())  # type: ignore[arg-type]
        gone.write(b"head")
        second.closed = True  # the client left before the loop's pass ended
        await one_pass()
        return first.sends, second.sends

    closed, gone = asyncio.run(go())
    assert closed == [b"head"]
    assert gone == []


async def whole_then_stream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """/whole: a whole answer. /stream: a stream whose first chunk waits for the client to have
    read the headers (the test says so through `headers_seen`)."""
    if scope["path"] == "/whole":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"5")]})
        await send({"type": "http.response.body", "body": b"whole"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await scope["state"]["headers_seen"].wait()
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b""})


@contextlib.asynccontextmanager
async def server(app: Any, state: dict[str, Any]) -> AsyncIterator[int]:
    config = Config(app=app, http=GatewayHttpProtocol, lifespan="off", log_level="warning")
    config.load()
    server_state = ServerState()
    listening = await asyncio.get_running_loop().create_server(
        lambda: config.http_protocol_class(config=config, server_state=server_state, app_state=state),
        "127.0.0.1", 0,
    )
    try:
        yield listening.sockets[0].getsockname()[1]
    finally:
        listening.close()
        for connection in list(server_state.connections):
            connection.shutdown()
        await listening.wait_closed()


async def read_head(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)


@pytest.mark.django_db
def test_over_a_socket_whole_answers_arrive_intact_and_a_streams_head_does_not_wait_for_its_first_chunk():
    async def go() -> tuple[list[bytes], bytes, bytes]:
        state: dict[str, Any] = {"headers_seen": asyncio.Event()}
        async with server(whole_then_stream, state) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            wholes = []
            for _ in range(2):  # the same connection, kept alive: each response joins its own head
                writer.write(b"GET /whole HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
                head = await read_head(reader)
                wholes.append(head.split(b"\r\n", 1)[0] + b" " + await reader.readexactly(5))
            writer.write(b"GET /stream HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            stream_head = await read_head(reader)  # before any chunk: the app waits for this
            state["headers_seen"].set()
            rest = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 10)
            writer.close()
            return wholes, stream_head, rest

    wholes, stream_head, rest = asyncio.run(go())
    assert wholes == [b"HTTP/1.1 200 OK whole"] * 2
    assert stream_head.startswith(b"HTTP/1.1 200 OK") and b"transfer-encoding: chunked" in stream_head
    assert rest == b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"
