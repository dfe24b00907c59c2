"""A batch flood in a process of its own: a closed loop of ``concurrency`` streamed requests.

Thousands of batch tokens a second parsed in the same event loop that times the interactive
requests would delay their chunks and inflate the TTFT we measure; a separate process keeps the
flood's cost out of the measurement (it still costs the gateway and the box, as it should).
``time.perf_counter`` is the system-wide monotonic clock on Linux, so the child's timestamps
line up with the parent's. The child is spawned, so a script using this needs the usual
``if __name__ == "__main__":`` guard (``python -m bench.x`` modules have one).

    flood = Flood(target, "carol", 64, model="sim", max_tokens=400)
    flood.start()                # returns once the requests are going out
    ...
    calls = await flood.stop()   # cancels them (clients disconnect) and collects the records
"""

from __future__ import annotations

import asyncio
import multiprocessing
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from bench import load
from bench.load import Call, Target


@dataclass(frozen=True)
class FloodSpec:
    target: Target
    user: str
    concurrency: int
    model: str
    max_tokens: int
    keep_times: bool = True
    kind: str = "batch"  # the calls' label: "batch", or "greedy" for an interactive key's flood
    stream: bool = True  # False: whole answers (the gateway can redo them, so they may borrow more)


def batch_text(n: int) -> str:
    # ~70 tokens of prompt, different per request (no prefix-cache help).
    return f"Batch document {n}: " + " ".join(f"item{n}-{i}" for i in range(40))


async def _flood(conn: Connection, spec: FloodSpec) -> None:
    calls: list[Call] = []
    async with load.make_client(connections=spec.concurrency + 8) as client:
        tasks = []
        for i in range(spec.concurrency):
            def body(n: int, i: int = i) -> load.Body:
                return load.chat_body(spec.model, batch_text(i * 100_000 + n), spec.max_tokens, spec.stream)
            tasks.append(asyncio.create_task(load.closed_loop(
                client, spec.user, spec.kind, spec.target, body, calls,
                keep_times=spec.keep_times)))
        conn.send("ready")
        await asyncio.to_thread(conn.recv)  # "stop"
        await load.cancel_all(tasks)
    conn.send(calls)


def _main(conn: Connection, spec: FloodSpec) -> None:
    asyncio.run(_flood(conn, spec))


class Flood:
    def __init__(self, target: Target, user: str, concurrency: int, *, model: str,
                 max_tokens: int, keep_times: bool = True, kind: str = "batch", stream: bool = True) -> None:
        self.spec = FloodSpec(target, user, concurrency, model, max_tokens, keep_times, kind, stream)
        self._conn: Connection | None = None
        self._process: Any = None

    def start(self, timeout: float = 30.0) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_main, args=(child, self.spec), daemon=True,
                                        name=f"flood-{self.spec.user}")
        self._process.start()
        child.close()
        if not self._conn.poll(timeout) or self._conn.recv() != "ready":
            self.kill()
            raise RuntimeError("the flood process did not start")

    async def stop(self, timeout: float = 60.0) -> list[Call]:
        """Cancel every request (their connections close) and return what they recorded."""
        if self._conn is None or self._process is None:
            return []  # never started (start() raised)
        try:
            self._conn.send("stop")
            if not await asyncio.to_thread(self._conn.poll, timeout):
                raise TimeoutError(f"the flood process did not stop within {timeout}s")
            calls: list[Call] = self._conn.recv()
            await asyncio.to_thread(self._process.join, 10.0)
            return calls
        finally:
            self.kill()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else int(self._process.pid)

    def kill(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(5.0)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
