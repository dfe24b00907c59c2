"""Against real vLLM: whole answers borrow every slot, and a chat that comes has one given back at
once, and one more kept spare for the next chat: the gateway drops those requests (vLLM aborts a
request whose connection closes) and sends them again, so every answer still arrives whole.
(vLLM's priority policy alone would leave the chat waiting for a slot: it preempts only when KV
blocks run short.)"""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.conftest import Member
from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.engine.vllm_server import VLLMServer
from tests.fair_sharing.conftest import key_stats, wait_async
from tests.gateway_process import GatewayProcess

SLOTS = 4
ANSWER = 960  # tokens: a second or two each on the tiny model beside three others (context 1,024)
MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse."}]


def test_whole_answers_fill_a_real_engine_and_one_is_redone_for_a_chat(
    gateway_over, cast: dict[str, Member], vllm_pair: tuple[VLLMServer, VLLMServer]
):
    server = vllm_pair[1]  # the priority policy: it would not make room for the chat by itself
    # A gateway of its own: the session's may for a second still count an earlier test's replicas.
    gateway: GatewayProcess = gateway_over(name="vllm-priority", base_url=server.base_url, model=TINY,
                                           max_num_seqs=SLOTS)
    carol, alice = cast["carol"], cast["alice"]  # batch tier (borrows); interactive

    async def scenario():
        async with httpx.AsyncClient(timeout=300) as client:
            # Each key looked up once first: a key's first lookup can take seconds on two cores
            # busy with two engines, and the answers must all be under way when the chat comes.
            for member in (carol, alice):
                known = await client.get(gateway.url + "/v1/models",
                                         headers={"authorization": f"Bearer {member.secret}"})
                assert known.status_code == 200

            def ask(member: Member, tokens: int, n: int = 0):
                messages = [{"role": "user", "content": f"{MESSAGES[0]['content']} ({n})"}]  # no shared prefix
                return client.post(gateway.url + "/v1/chat/completions",
                                   headers={"authorization": f"Bearer {member.secret}"},
                                   json={"model": TINY, "messages": messages, "max_tokens": tokens,
                                         "ignore_eos": True})  # fmt: skip

            sent = time.monotonic()
            batch = [asyncio.create_task(ask(carol, ANSWER, n)) for n in range(SLOTS)]
            # Every slot, the reserve too: a streamed answer would leave 3 of these 4 free.
            await wait_async(lambda: key_stats(carol)["in_flight"] == SLOTS or any(t.done() for t in batch),
                             timeout=120)
            ended = [t.result() for t in batch if t.done()]
            assert not ended, [(r.status_code, r.headers.get("x-gpuportal-queued-ms")) for r in ended]
            started = time.monotonic()
            chat = await ask(alice, 4, SLOTS)
            chat_ended = time.monotonic()
            answers = await asyncio.gather(*batch)
            return chat, (started - sent, chat_ended - sent, [a.elapsed.total_seconds() for a in answers]), answers

    chat, timeline, answers = asyncio.run(scenario())
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"]
    assert int(chat.headers["x-gpuportal-queued-ms"]) < 1000, timeline  # not a whole answer's wait
    assert [a.status_code for a in answers] == [200] * SLOTS
    assert all(a.json()["usage"]["completion_tokens"] == ANSWER for a in answers)  # whole, though redone
    # Two gave their slots back (the chat's and the spare): one had its slot again once the chat
    # ended, the other waited for one of the first two answers to end, since one slot stays spare.
    waits = sorted(int(a.headers["x-gpuportal-queued-ms"]) for a in answers)
    assert waits[-1] >= 300 and waits[-2] > 0, (waits, timeline, chat.headers["x-gpuportal-queued-ms"])
