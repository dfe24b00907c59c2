"""Large request bodies take turns at the parser, and leave the event loop to everyone else
between turns.

Parsing runs on the event loop and holds it: a body at the size limit made of many small values
takes orjson around 0.1 s (the standard library took 0.25 s), and a thread would not help, since
the parser holds the GIL as long. Left alone, a few clients sending such bodies back to back kept
the loop busy and another key's /v1/models waited 0.4 s. So a body above THRESHOLD_BYTES waits
for the ones before it, and after each such parse the next waits (1 / SHARE - 1) times as long as
that one took: large bodies get at most SHARE of the loop's time, and their senders, not
everybody, wait for the rest. Smaller bodies (nearly all) parse at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from fairness.gateway import request_parsing
from fairness.gateway.request_parsing import ProxyRequest

THRESHOLD_BYTES = 256 * 1024
SHARE = 1 / 3


class LargeBodyGate:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._turn = asyncio.Lock()
        self._next_at = float("-inf")

    async def parse(self, body: bytes, endpoint: str) -> ProxyRequest:
        if len(body) <= THRESHOLD_BYTES:
            return request_parsing.parse(body, endpoint)
        async with self._turn:
            rest = self._next_at - self.clock()
            if rest > 0:
                await asyncio.sleep(rest)
            started = self.clock()
            try:
                return request_parsing.parse(body, endpoint)
            finally:
                ended = self.clock()
                self._next_at = ended + (ended - started) * (1 / SHARE - 1)
