"""Which client carries a proxied request: the lean one for http://, httpx for https://."""

import asyncio
import dataclasses

import httpx
import pytest

from fairness.gateway import engine_client
from fairness.gateway.errors import ApiError
from tests.support.processes import free_port
from tests.support.replicas import replica


@pytest.fixture
async def tls_engine():
    """httpx's client for this loop, answering as an engine behind TLS would (the seam mocked)."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b'{"ok": true}')

    engine_client._clients[asyncio.get_running_loop()] = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return seen


async def test_an_engine_behind_tls_is_reached_through_httpx(tls_engine):
    target = dataclasses.replace(replica("tls", base_url="https://engine.invalid:8443"), api_key="engine-secret")
    answer = await engine_client.open_stream(target, "/v1/chat/completions", b"{}", "req-9")
    assert answer.status_code == 200 and await answer.aread() == b'{"ok": true}'
    (request,) = tls_engine
    assert str(request.url) == "https://engine.invalid:8443/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer engine-secret"
    assert request.headers["x-request-id"] == "req-9"
    await engine_client.aclose()


async def test_a_plain_http_engine_is_reached_through_the_lean_client():
    target = replica("down", base_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ApiError) as refused:
        await engine_client.open_stream(target, "/v1/chat/completions", b"{}", "req-1")
    assert refused.value.status == 502 and refused.value.code == "upstream_unreachable"
    assert isinstance(refused.value.__cause__, httpx.ConnectError)
    assert asyncio.get_running_loop() not in engine_client._clients  # httpx was never needed
    await engine_client.aclose()


async def test_a_tls_engines_answer_read_whole_is_capped_with_or_without_a_length(settings):
    settings.GP_MAX_ENGINE_RESPONSE_BYTES = 4096

    async def unannounced():
        for _ in range(64):
            yield b"x" * 1024

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/announced":
            return httpx.Response(200, content=b"x" * 8192)  # content-length says it at once
        if request.url.path == "/unannounced":
            return httpx.Response(200, content=unannounced())  # counted as it arrives
        return httpx.Response(200, content=b"x" * 4096)

    engine_client._clients[asyncio.get_running_loop()] = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    target = replica("tls", base_url="https://engine.invalid:8443")
    for path in ("/announced", "/unannounced"):
        response = await engine_client.open_stream(target, path, b"{}", "req-1")
        with pytest.raises(ApiError) as refused:
            await engine_client.read_whole(response, target)
        assert (refused.value.status, refused.value.code) == (502, "engine_response_too_large")
    response = await engine_client.open_stream(target, "/at-the-cap", b"{}", "req-2")
    assert await engine_client.read_whole(response, target) == b"x" * 4096
    await engine_client.aclose()
