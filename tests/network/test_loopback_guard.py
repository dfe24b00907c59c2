"""The test process's network guard (tests/support/network_guard.py): every door out refuses an address
past loopback before the real call is made, and loopback, ::1 and AF_UNIX still work."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import network_guard
from tests.support.network_guard import OutsideLoopback

DOCUMENTATION = "192.0.2.1"  # TEST-NET-1: never to be reached, and never tried here


@pytest.fixture
def real_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The guard's real functions replaced by ones that only note the call: were the guard to
    let an address through, no packet would leave all the same, and the test would see it."""
    calls: list[str] = []

    def noting(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise ConnectionRefusedError(f"{name} reached (the guard let it through)")

        async def acall(*args: Any, **kwargs: Any) -> Any:
            return call(*args, **kwargs)

        return acall if name in ("sock_connect", "create_connection") else call

    for name in list(network_guard._real):
        monkeypatch.setitem(network_guard._real, name, noting(name))
    yield calls
    assert network_guard.refused()  # the test's own refusals are expected: do not fail it for them


def test_a_blocking_connect_to_a_documentation_address_is_refused_before_it_is_made(real_calls):
    with socket.socket() as sock, pytest.raises(OutsideLoopback, match="192.0.2.1"):
        sock.connect((DOCUMENTATION, 80))
    with socket.socket() as sock, pytest.raises(OutsideLoopback):
        sock.connect_ex((DOCUMENTATION, 80))
    with socket.socket(socket.AF_INET6) as sock, pytest.raises(OutsideLoopback):
        sock.connect(("2001:db8::1", 80, 0, 0))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, pytest.raises(OutsideLoopback):
        sock.sendto(b"x", (DOCUMENTATION, 53))
    with socket.socket() as sock, pytest.raises(OutsideLoopback):
        sock.connect(("::ffff:192.0.2.1", 80))
    assert real_calls == []


def test_names_are_not_looked_up_unless_they_are_local(real_calls):
    with pytest.raises(OutsideLoopback, match="engine.example"):
        socket.getaddrinfo("engine.example", 80)
    with socket.socket() as sock, pytest.raises(OutsideLoopback):
        sock.connect(("gpu0", 8000))  # a connect would look the name up itself
    with pytest.raises(socket.gaierror):  # .invalid never resolves: no query is sent for it
        socket.getaddrinfo("engine.invalid", 80)
    assert real_calls == []


def test_a_local_name_that_resolves_past_loopback_is_refused(monkeypatch):
    monkeypatch.setitem(network_guard._real, "getaddrinfo",
                        lambda *args, **kwargs: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (DOCUMENTATION, 80))])
    with pytest.raises(OutsideLoopback, match="resolves to 192.0.2.1"):
        socket.getaddrinfo("localhost", 80)
    assert network_guard.refused()


async def test_asyncio_and_httpx_are_refused_before_they_connect(real_calls):
    loop = asyncio.get_running_loop()
    with pytest.raises(OutsideLoopback):
        await asyncio.open_connection(DOCUMENTATION, 80)
    with socket.socket() as sock:
        sock.setblocking(False)
        with pytest.raises(OutsideLoopback):
            await loop.sock_connect(sock, (DOCUMENTATION, 80))
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://{DOCUMENTATION}:8000/health")
    assert real_calls == []


def test_a_swallowed_refusal_is_still_kept_for_the_test_to_fail_with():
    with contextlib.suppress(httpx.ConnectError):  # the code under test carries on ("replica down")
        httpx.get(f"http://{DOCUMENTATION}:8000/health", timeout=1)  # as a health probe would try
    with pytest.raises(pytest.fail.Exception, match=f"reached past loopback: .*{DOCUMENTATION}"):
        network_guard.fail_if_refused()  # what the autouse fixture does after every test
    network_guard.fail_if_refused()  # and only once


async def test_loopback_ipv6_loopback_and_unix_sockets_still_connect():
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(2))
        await writer.drain()
        writer.close()

    for host in ("127.0.0.1", "localhost"):
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"hi")
        assert await reader.readexactly(2) == b"hi"
        writer.close()
        server.close()
    if socket.has_ipv6:
        with socket.socket(socket.AF_INET6) as listener:
            try:
                listener.bind(("::1", 0))
            except OSError:
                pass  # no IPv6 loopback on this host
            else:
                listener.listen()
                with socket.create_connection(listener.getsockname()[:2]):
                    pass
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "s")
        server = await asyncio.start_unix_server(answer, path)
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"ok")
        assert await reader.readexactly(2) == b"ok"
        writer.close()
        server.close()
    assert network_guard.refused() == []
