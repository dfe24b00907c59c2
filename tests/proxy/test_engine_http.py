"""The engine client against a real TCP server that answers exactly what each test scripts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from fairness.gateway import engine_http
from tests.support.polling import async_wait_for
from tests.support.processes import free_port

Answer = Callable[["Exchange"], Awaitable[None]]


class Exchange:
    """One request as the server saw it, and the means to answer it."""

    def __init__(self, head: bytes, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.head, self.body, self.reader, self.writer = head, body, reader, writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()


class ScriptedServer:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.exchanges: list[Exchange] = []
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                exchange = Exchange(head, await reader.readexactly(length), reader, writer)
                self.exchanges.append(exchange)
                await self.answer(exchange)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Answer], Awaitable[ScriptedServer]]]:
    servers: list[ScriptedServer] = []

    async def start(answer: Answer) -> ScriptedServer:
        server = ScriptedServer(answer)
        await server.start()
        servers.append(server)
        return server

    yield start
    engine_http.close_pool()
    for server in servers:
        await server.stop()


def whole(body: bytes, status: str = "200 OK") -> bytes:
    return f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def post(url: str, body: bytes = b'{"x": 1}', read_timeout: float = 5.0) -> engine_http.EngineResponse:
    return await engine_http.post(
        url, "/v1/chat/completions", body, {"Content-Type": "application/json", "X-Request-Id": "req-1"},
        connect_timeout=2.0, read_timeout=read_timeout,
    )


async def test_an_answer_is_read_whole_and_its_connection_reused(serve):
    async def answer(exchange: Exchange) -> None:
        await exchange.send(whole(b'{"echo": ' + exchange.body + b"}"))

    server = await serve(answer)
    for n in (1, 2):
        response = await post(server.url, body=b'{"n": %d}' % n)
        assert response.status_code == 200
        assert await response.aread() == b'{"echo": {"n": %d}}' % n
    assert server.connections == 1
    head = server.exchanges[0].head
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert f"Host: {server.url.removeprefix('http://')}".encode() in head
    assert b"X-Request-Id: req-1" in head


async def test_a_base_url_with_a_path_prefixes_the_request_path(serve):
    async def answer(exchange: Exchange) -> None:
        await exchange.send(whole(b"{}"))

    server = await serve(answer)
    await (await post(server.url + "/engine-a/")).aread()
    assert server.exchanges[0].head.startswith(b"POST /engine-a/v1/chat/completions HTTP/1.1\r\n")


async def test_the_status_of_an_error_answer_and_its_body_come_through(serve):
    async def answer(exchange: Exchange) -> None:
        await exchange.send(whole(b'{"error": "no"}', status="400 Bad Request"))

    server = await serve(answer)
    response = await post(server.url)
    assert response.status_code == 400
    assert await response.aread() == b'{"error": "no"}'


async def test_a_chunk_is_handed_over_before_the_next_is_sent(serve):
    first_seen = asyncio.Event()

    async def answer(exchange: Exchange) -> None:
        await exchange.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"data: 1\n\n"))
        await first_seen.wait()  # the client must have the first before the engine writes more
        await exchange.send(chunk(b"data: 2\n\n") + b"0\r\n\r\n")

    server = await serve(answer)
    response = await post(server.url)
    received = []
    async for data in response.aiter_raw():
        received.append(data)
        first_seen.set()
    assert received == [b"data: 1\n\n", b"data: 2\n\n"]
    await (await post(server.url)).aclose()  # the finished stream's connection was kept
    assert server.connections == 1


async def test_a_kept_connection_the_engine_dropped_is_replaced_without_an_error(serve):
    async def answer(exchange: Exchange) -> None:
        if len(server.exchanges) == 2:
            exchange.writer.close()  # a restarted engine: the kept connection dies unanswered
            return
        await exchange.send(whole(b"{}"))

    server = await serve(answer)
    await (await post(server.url)).aread()
    response = await post(server.url)
    assert response.status_code == 200
    assert await response.aread() == b"{}"
    assert server.connections == 2


async def test_kept_connections_the_engine_dropped_together_cost_one_try_then_a_fresh_one(serve):
    # Three connections kept from three requests at once, then dropped together (an engine's
    # keep-alive timeout), before this loop has seen it: the next request tries one, then opens
    # a new one rather than trying the next kept one.
    release = asyncio.Event()

    async def answer(exchange: Exchange) -> None:
        if len(server.exchanges) <= 3:
            await release.wait()
            await exchange.send(whole(b"{}"))
        elif server.connections <= 3:
            exchange.writer.close()
        else:
            await exchange.send(whole(b'{"fresh": 1}'))

    server = await serve(answer)
    three = [asyncio.ensure_future(post(server.url)) for _ in range(3)]
    async def all_in() -> bool:
        return len(server.exchanges) == 3

    await async_wait_for(all_in, timeout=5, what="three requests in")
    release.set()
    for response in await asyncio.gather(*three):
        await response.aread()
    assert server.connections == 3
    response = await post(server.url)
    assert response.status_code == 200
    assert await response.aread() == b'{"fresh": 1}'
    assert (server.connections, len(server.exchanges)) == (4, 5)


async def test_a_refused_connection_is_a_connect_error():
    with pytest.raises(httpx.ConnectError):
        await post(f"http://127.0.0.1:{free_port()}")


async def test_silence_past_the_read_timeout_is_a_read_timeout(serve):
    async def answer(exchange: Exchange) -> None:
        await asyncio.Event().wait()

    server = await serve(answer)
    with pytest.raises(httpx.ReadTimeout):
        await post(server.url, read_timeout=0.2)


async def test_a_malformed_answer_is_a_protocol_error(serve):
    async def answer(exchange: Exchange) -> None:
        await exchange.send(b"this is not HTTP\r\n\r\n")

    server = await serve(answer)
    with pytest.raises(httpx.RemoteProtocolError):
        await post(server.url)


async def test_an_engine_that_dies_mid_body_is_a_read_error_after_what_it_sent(serve):
    async def answer(exchange: Exchange) -> None:
        await exchange.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n" + b"x" * 10)
        exchange.writer.close()

    server = await serve(answer)
    response = await post(server.url)
    received = []
    with pytest.raises(httpx.ReadError):
        async for data in response.aiter_raw():
            received.append(data)
    assert received == [b"x" * 10]


async def test_closing_a_stream_early_hangs_up_on_the_engine(serve):
    hung_up = asyncio.Event()

    async def answer(exchange: Exchange) -> None:
        await exchange.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"data: 1\n\n"))
        while await exchange.reader.read(4096):
            pass
        hung_up.set()  # end of file: the client closed its side

    server = await serve(answer)
    response = await post(server.url)
    async for _ in response.aiter_raw():
        break
    await response.aclose()
    await asyncio.wait_for(hung_up.wait(), timeout=5)


async def test_an_answer_delimited_by_closing_is_read_whole_and_not_reused(serve):
    async def answer(exchange: Exchange) -> None:
        await exchange.send(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        exchange.writer.close()

    server = await serve(answer)
    assert await (await post(server.url)).aread() == b"all of it"
    assert await (await post(server.url)).aread() == b"all of it"
    assert server.connections == 2


async def test_a_client_that_falls_behind_pauses_the_engine_and_still_gets_it_all(serve):
    payload = bytes(range(256)) * 32768  # 8 MiB: far more than the read buffer may hold

    async def answer(exchange: Exchange) -> None:
        await exchange.send(whole(payload))

    server = await serve(answer)
    response = await post(server.url)
    connection = response._connection
    assert connection is not None

    async def paused() -> bool:
        return connection.paused

    await async_wait_for(paused, timeout=5, what="reading to pause while nobody reads")
    assert connection.buffered < engine_http.HIGH_WATER + 1024 * 1024  # the rest waits in the engine
    assert await response.aread() == payload
    await (await post(server.url)).aread()
    assert server.connections == 1


async def test_only_plain_http_engines_are_spoken_to():
    with pytest.raises(httpx.UnsupportedProtocol):
        await post("https://engine.invalid")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Authorization", "Bearer engine-key\r\nX-Injected: yes"),
        ("Authorization", "Bearer engine-key\nX-Injected: yes"),
        ("Authorization", "Bearer engine-key\x00"),
        ("X-Injected\r\nX-Other", "1"),
    ],
    ids=["crlf-value", "lf-value", "nul-value", "crlf-name"],
)
async def test_a_header_that_would_break_its_line_is_refused_before_anything_is_sent(serve, name, value):
    async def answer(exchange: Exchange) -> None:
        await exchange.send(whole(b"{}"))

    server = await serve(answer)
    with pytest.raises(httpx.LocalProtocolError) as refused:
        await engine_http.post(server.url, "/v1/chat/completions", b"{}", {name: value},
                               connect_timeout=2.0, read_timeout=5.0)
    assert "engine-key" not in str(refused.value)  # the error never quotes what may be a secret
    assert server.connections == 0 and server.exchanges == []


async def test_response_headers_past_the_cap_are_refused_and_the_connection_dropped(serve):
    hung_up = asyncio.Event()
    sent = 0

    async def answer(exchange: Exchange) -> None:
        nonlocal sent
        await exchange.send(b"HTTP/1.1 200 OK\r\nx-filler: ")
        try:
            for _ in range(4 * 1024):  # 64 MiB of one header, unless the client hangs up first
                await exchange.send(b"a" * 16 * 1024)
                sent += 16 * 1024
        except ConnectionError:
            pass
        hung_up.set()

    server = await serve(answer)
    with pytest.raises(engine_http.ResponseTooLarge):
        await post(server.url)
    await asyncio.wait_for(hung_up.wait(), timeout=10)
    assert sent < 32 * 1024 * 1024  # what the sockets' buffers took before the hang-up, at most


async def test_a_body_read_whole_past_the_cap_is_refused_but_a_stream_of_it_is_relayed(serve):
    payload = b"x" * (1024 * 1024)

    async def answer(exchange: Exchange) -> None:
        await exchange.send(whole(payload))

    server = await serve(answer)

    async def capped(limit: int) -> engine_http.EngineResponse:
        return await engine_http.post(
            server.url, "/v1/chat/completions", b"{}", {}, connect_timeout=2.0, read_timeout=5.0,
            max_response_bytes=limit,
        )

    with pytest.raises(engine_http.ResponseTooLarge):
        await (await capped(64 * 1024)).aread()
    assert await (await capped(len(payload))).aread() == payload  # exactly the cap is allowed
    streamed = b"".join([chunk async for chunk in (await capped(64 * 1024)).aiter_raw()])
    assert streamed == payload  # a stream is handed over piece by piece and never held whole
    assert server.connections == 2  # the refused answer's connection was closed, not reused
