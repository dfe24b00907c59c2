"""No idle reserve: work that can be redone (answers not streamed) fills every slot while nobody
chats; a chat that comes has one slot given back at once, and the request that gave it runs
again later from its place in line. Nothing is lost, only delayed, and nothing is charged twice."""

import asyncio

import httpx

from fairness.accounting import usage
from fairness.models import Replica, UsageRecord
from fairness.store.redis_clients import redis_sync
from tests.support.cast import MODEL
from tests.support.live_admission import chat_body, drop, nothing_held, send, wait_async
from tests.support.polling import wait_for

ANSWER_TOKENS = 2000  # about a second at speed 20


def test_whole_answers_fill_the_card_give_a_slot_back_for_a_chat_and_all_finish(gateway, cast, engine8):
    Replica.objects.create(name="sim-8", base_url=engine8.url, model=MODEL, max_num_seqs=8)
    carol, alice = cast["carol"], cast["alice"]  # batch (2 per key, 2 in the pool); reserve 3

    async def scenario():
        async with httpx.AsyncClient(timeout=120) as client:
            body = chat_body(carol, max_tokens=ANSWER_TOKENS)
            batch = [asyncio.create_task(send(client, gateway.url, carol, body)) for _ in range(10)]
            await wait_async(lambda: engine8.stats()["running"] == 8)  # the reserve too: nobody chats
            chat = await send(client, gateway.url, alice, chat_body(alice, max_tokens=5))
            return chat, await asyncio.gather(*batch)

    chat, answers = asyncio.run(scenario())
    assert chat.status_code == 200
    assert int(chat.headers["x-gpuportal-queued-ms"]) < 250  # one slot given back, not one answer's wait
    assert [a.status_code for a in answers] == [200] * 10
    assert all(a.json()["usage"]["completion_tokens"] == ANSWER_TOKENS for a in answers)  # whole, redone
    carol_log = [e for e in engine8.requests() if e["user"] == "carol"]
    assert len(carol_log) == 12  # two dropped: for the chat and for the spare the next chat finds
    wait_for(nothing_held, timeout=5, what="leases back")

    def carol_rows() -> int:
        usage.flush(redis_sync())  # what the worker's flush task does
        return UsageRecord.objects.filter(key__owner__username="carol").count()

    wait_for(lambda: carol_rows() >= 10, timeout=10, what="carol's usage rows")
    rows = UsageRecord.objects.filter(key__owner__username="carol")
    assert [r.status for r in rows] == [200] * 10  # once each: a dropped attempt is not a request
    assert sum(r.completion_tokens for r in rows) == 10 * ANSWER_TOKENS  # nor charged


def test_streamed_answers_cannot_be_redone_and_leave_the_reserve(gateway, cast, engine8):
    Replica.objects.create(name="sim-8", base_url=engine8.url, model=MODEL, max_num_seqs=8)
    carol = cast["carol"]

    async def scenario():
        async with httpx.AsyncClient(timeout=120) as client:
            body = chat_body(carol, max_tokens=4000, stream=True)
            batch = [asyncio.create_task(send(client, gateway.url, carol, body)) for _ in range(10)]
            await wait_async(lambda: engine8.stats()["running"] == 5)
            peak = max(engine8.stats()["running"] for _ in range(20))
            await drop(batch)
            return peak

    assert asyncio.run(scenario()) == 5  # 8 slots less the reserve of 3
    wait_for(nothing_held, timeout=10, what="leases back")
