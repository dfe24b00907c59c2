"""Idle capacity is not wasted: a lone batch job borrows all but the reserve."""

import asyncio
import time

import httpx

from fairness.models import Replica
from tests.support.cast import MODEL
from tests.support.live_admission import chat_body, drop, nothing_held, peak_overlap, send, wait_async
from tests.support.polling import wait_for


def test_a_lone_batch_key_borrows_all_slots_but_the_reserve(gateway, cast, engine8):
    Replica.objects.create(name="sim-8", base_url=engine8.url, model=MODEL, max_num_seqs=8)
    carol, alice = cast["carol"], cast["alice"]  # batch: 2 per key, 2 in the pool; reserve is 3

    async def scenario():
        async with httpx.AsyncClient(timeout=120) as client:
            long = chat_body(carol, max_tokens=2500, stream=True)
            batch = [asyncio.create_task(send(client, gateway.url, carol, long)) for _ in range(10)]
            await wait_async(lambda: engine8.stats()["running"] == 5)
            chat = await send(client, gateway.url, alice, chat_body(alice, max_tokens=5))
            dropped_at = time.monotonic()  # the engine's log uses the same system-wide clock
            await drop(batch)
            return chat, dropped_at

    chat, dropped_at = asyncio.run(scenario())
    log = engine8.requests()
    # Hanging up frees a stream's lease before the engine has aborted it, and a queued request
    # granted meanwhile can overlap it there for a moment: judge the steady state before that.
    batch_log = [e for e in log if e["user"] == "carol" and e["arrived"] < dropped_at]
    assert peak_overlap(batch_log) == 5  # 8 slots less the reserve of 3, not the cap of 2
    assert chat.status_code == 200
    assert int(chat.headers["x-gpuportal-queued-ms"]) < 100  # the reserve was there for alice
    wait_for(nothing_held, timeout=5, what="leases back")
