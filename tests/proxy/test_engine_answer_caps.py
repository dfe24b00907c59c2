"""An engine that answers far too much cannot fill the gateway's memory: 502, and nothing else."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from fairness.models import Replica
from tests.support.cast import MODEL
from tests.support.processes import free_port, start_gateway

BIG = "please answer with far too much"


class VerboseEngine:
    """Answers completions (and anything else) with a small usage-bearing body, or with a body
    of `size` bytes when the request contains BIG; keeps connections alive like an engine."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.usage: object = {"prompt_tokens": 1, "completion_tokens": 1}  # what answers report
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        async def serve() -> None:
            self.server = await asyncio.start_server(self._answer, "127.0.0.1", self.port)
            started.set()

        self.thread = threading.Thread(
            target=lambda: (self.loop.run_until_complete(serve()), self.loop.run_forever()), daemon=True
        )
        self.thread.start()
        assert started.wait(5)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).lower()
                length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0]) if b"content-length: " in head else 0
                body = await reader.readexactly(length)
                if BIG.encode() in body:
                    content = json.dumps({"filler": "x" * self.size}).encode()
                else:
                    content = json.dumps({"choices": [], "usage": self.usage}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n" % len(content) + content)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        """Ends its connections on its own loop, then the loop: a connection's coroutine left to
        the garbage collector would run its cleanup on a closed loop, at whatever moment."""

        async def shutdown() -> None:
            self.server.close()
            connections = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in connections:
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


@pytest.fixture
def verbose_engine():
    engine = VerboseEngine(size=1024 * 1024)
    yield engine
    engine.close()


def test_a_non_streaming_answer_over_the_cap_gets_502_and_leaves_the_replica_up(
    live_db_url, redis_url, cast, verbose_engine
):
    Replica.objects.create(name="verbose", base_url=f"http://127.0.0.1:{verbose_engine.port}", model=MODEL)
    capped = start_gateway(live_db_url, name="capped", GP_MAX_ENGINE_RESPONSE_BYTES=str(64 * 1024))
    headers = {"authorization": f"Bearer {cast['alice'].secret}"}

    def chat(content: str) -> httpx.Response:
        body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 4}
        return httpx.post(capped.url + "/v1/chat/completions", json=body, headers=headers, timeout=30)

    try:
        first = chat("hello")
        assert first.status_code == 200, first.text
        refused = chat(BIG)
        assert refused.status_code == 502, refused.text
        error = refused.json()["error"]
        assert error["code"] == "engine_response_too_large" and error["type"] == "upstream_error"
        assert "x" * 100 not in refused.text  # none of the engine's answer reaches the client
        again = chat("hello again")
        assert again.status_code == 200, again.text  # that request's failure, not the replica's
    finally:
        capped.stop()
