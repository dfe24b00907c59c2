"""Against real vLLM: whole answers borrow every slot, and a chat that comes has one given back at
once: the gateway drops that request (vLLM aborts a request whose connection closes; the enginesim
test counts the attempts) and sends it again, so every answer still arrives whole. (vLLM's priority
policy alone would leave the chat waiting for a slot: it preempts only when KV blocks run short.)"""

from __future__ import annotations

import asyncio
import time

import httpx

from fairness.models import Replica
from tests.conftest import Member
from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.engine.vllm_server import VLLMServer
from tests.fair_sharing.conftest import key_stats, wait_async
from tests.gateway_process import GatewayProcess

SLOTS = 4
ANSWER = 960  # tokens: about two seconds each on the tiny model beside three others (context 1,024)
MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse."}]


def test_whole_answers_fill_a_real_engine_and_one_is_redone_for_a_chat(
    gateway: GatewayProcess, cast: dict[str, Member], vllm_pair: tuple[VLLMServer, VLLMServer]
):
    server = vllm_pair[1]  # the priority policy: it would not make room for the chat by itself
    Replica.objects.create(name="vllm-priority", base_url=server.base_url, model=TINY, max_num_seqs=SLOTS)
    carol, alice = cast["carol"], cast["alice"]  # batch tier (borrows); interactive

    async def scenario():
        async with httpx.AsyncClient(timeout=300) as client:
            def ask(member: Member, tokens: int, n: int = 0):
                messages = [{"role": "user", "content": f"{MESSAGES[0]['content']} ({n})"}]  # no shared prefix
                return client.post(gateway.url + "/v1/chat/completions",
                                   headers={"authorization": f"Bearer {member.secret}"},
                                   json={"model": TINY, "messages": messages, "max_tokens": tokens,
                                         "ignore_eos": True})  # fmt: skip

            batch = [asyncio.create_task(ask(carol, ANSWER, n)) for n in range(SLOTS)]
            # Every slot, the reserve too: a streamed answer would leave 3 of these 4 free.
            await wait_async(lambda: key_stats(carol)["in_flight"] == SLOTS, timeout=120)
            started = time.monotonic()
            chat = await ask(alice, 4, SLOTS)
            return chat, time.monotonic() - started, await asyncio.gather(*batch)

    chat, chat_seconds, answers = asyncio.run(scenario())
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"]
    assert int(chat.headers["x-gpuportal-queued-ms"]) < 1000, chat_seconds  # not a whole answer's wait
    assert [a.status_code for a in answers] == [200] * SLOTS
    assert all(a.json()["usage"]["completion_tokens"] == ANSWER for a in answers)  # whole, though redone
    # One of them, admitted at once, later waited for a slot: the one it gave back for the chat.
    assert max(int(a.headers["x-gpuportal-queued-ms"]) for a in answers) >= 500
