"""Every slot taken is given back: success, engine error, disconnects, a killed gateway."""

import asyncio
import time

import httpx

from fairness.models import Replica
from tests.support.cast import MODEL
from tests.support.live_admission import chat_body, drop, hold, key_stats, nothing_held, send, wait_async
from tests.support.polling import wait_for
from tests.support.processes import start_gateway


def test_success_and_engine_errors_give_their_slots_back(gateway, cast, on_engine8, engine8):
    alice = cast["alice"]
    assert httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(alice),
                      headers={"authorization": f"Bearer {alice.secret}"}).status_code == 200
    engine8.set_faults(error_500=True)
    assert httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(alice),
                      headers={"authorization": f"Bearer {alice.secret}"}).status_code == 502
    wait_for(nothing_held, timeout=5, what="leases back after success and error")


def test_leaving_while_queued_or_mid_stream_gives_everything_back(gateway, cast, on_engine8, engine8):
    alice = cast["alice"]  # interactive: two at a time

    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            holders = await hold(client, gateway.url, alice, 2)
            queued = asyncio.create_task(send(client, gateway.url, alice, chat_body(alice)))
            await wait_async(lambda: key_stats(alice)["queued"] == 1)
            queued.cancel()  # the client gives up while its request waits in the queue
            await wait_async(lambda: key_stats(alice)["queued"] == 0)
            assert (await asyncio.to_thread(key_stats, alice))["in_flight"] == 2
            await drop(holders)  # and the two running streams are dropped mid-way

    asyncio.run(scenario())
    wait_for(nothing_held, timeout=5, what="leases back after the disconnects")
    wait_for(lambda: engine8.stats()["running"] == 0, timeout=5, what="the engine to drop the streams")
    assert len(engine8.requests()) == 2  # the queued request never reached the engine


def test_a_killed_gateways_leases_vanish_within_one_ttl(live_db_url, redis_url, cast, engine8):
    Replica.objects.create(name="sim-8", base_url=engine8.url, model=MODEL, max_num_seqs=8)
    doomed = start_gateway(live_db_url, name="doomed", GP_LEASE_TTL_SECONDS="2")
    bob = cast["bob"]
    with httpx.stream("POST", doomed.url + "/v1/chat/completions", json=chat_body(bob, max_tokens=3000, stream=True),
                      headers={"authorization": f"Bearer {bob.secret}"}, timeout=60) as response:
        assert response.status_code == 200, response.read()
        assert key_stats(bob)["in_flight"] == 1
        doomed.kill()
        killed_at = time.monotonic()
    wait_for(lambda: key_stats(bob)["in_flight"] == 0, timeout=10, interval=0.1, what="the dead lease to expire")
    assert time.monotonic() - killed_at <= 2 + 1.0
