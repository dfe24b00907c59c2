"""The gateway holds the queue, not the engine: a real vLLM never sees more than its slots."""

import asyncio
import json

import httpx
from django.contrib.auth import get_user_model
from prometheus_client.parser import text_string_to_metric_families

from fairness.actions.keys import issue_key
from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY


def queue_time(text: str) -> tuple[float, float, float]:
    """(count, sum, count above 0.3 s) of vllm:request_queue_time_seconds."""
    count = total = under = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "vllm:request_queue_time_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_count"):
                count += sample.value
            elif sample.name.endswith("_sum"):
                total += sample.value
            elif sample.name.endswith("_bucket") and sample.labels.get("le") == "0.3":
                under += sample.value
    return count, total, count - under


FIRST_TOKENS, SECOND_TOKENS = 960, 400
PER_KEY = 4  # eight keys of the interactive tier (two each at once): 32 requests on 8 slots
REQUESTS = 8 * PER_KEY


def test_thirty_two_requests_on_eight_slots_queue_in_the_gateway(gateway_over, tiers, vllm_pair):
    engine = vllm_pair[0]
    gateway = gateway_over(name="vllm-fcfs", base_url=engine.base_url, model=TINY, max_num_seqs=8)
    # Each stream's X-GPUPortal-Queued-Ms is read below: a stream told its place while it waited
    # (queue events) started before it had one.
    tiers["interactive"].queue_events = False
    tiers["interactive"].save()
    secrets = []
    for index in range(8):
        user = get_user_model().objects.create(username=f"researcher-{index}")
        secrets.append(issue_key(user, tiers["interactive"])[1])
    before = queue_time(engine.metrics_text(timeout=60))

    async def burst():
        async with httpx.AsyncClient(timeout=300) as client:
            # Each key checked once first, so the requests reach the queue together: on two cores
            # running two engines, a key's first lookup in the database (on the gateway's one
            # database thread) took seconds, and requests let in after the first eight ended
            # rightly found a free slot.
            for secret in secrets:
                known = await client.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {secret}"})
                assert known.status_code == 200

            # Streams: a whole answer of the tiny model takes a fraction of a second, so a few
            # of them could end before the last reached the gateway; a stream's are slower.
            async def send(secret: str, tokens: int) -> tuple[int, str, int]:
                body = {"model": TINY, "prompt": "Once upon a time", "max_tokens": tokens, "ignore_eos": True,
                        "stream": True, "stream_options": {"include_usage": True}}
                async with client.stream("POST", gateway.url + "/v1/completions", json=body,
                                         headers={"authorization": f"Bearer {secret}"}) as response:
                    if response.status_code != 200:
                        return response.status_code, (await response.aread()).decode()[:300], 0
                    usage = [json.loads(line[6:])["usage"] async for line in response.aiter_lines()
                             if line.startswith("data: {") and '"usage":{' in line]
                    queued = response.headers["x-gpuportal-queued-ms"]
                    return response.status_code, queued, usage[-1]["completion_tokens"]

            # All at once. No state in between is polled for: the tiny model answers within
            # seconds, and on two cores busy with the engine a poll can miss a state that brief.
            tasks = [send(secret, FIRST_TOKENS if index < 4 else SECOND_TOKENS)
                     for index, secret in enumerate(secrets) for _ in range(PER_KEY)]
            return await asyncio.gather(*tasks)

    responses = asyncio.run(burst())
    failed = [(i, status, said) for i, (status, said, _) in enumerate(responses) if status != 200]
    assert not failed, f"{failed}\ngateway log:\n{gateway.log_tail()}\nengine log:\n{engine.log_tail(20)}"
    half = REQUESTS // 2
    assert [tokens for _, _, tokens in responses] == [FIRST_TOKENS] * half + [SECOND_TOKENS] * half
    # Eight slots: whichever eight the gateway let through first, the others waited in it (on two
    # cores running two engines, the gateway let the last in after the first had ended: not all).
    assert sum(int(queued) > 0 for _, queued, _ in responses) >= 8

    after = queue_time(engine.metrics_text(timeout=60))
    served, waited, waited_long = (a - b for a, b in zip(after, before, strict=True))
    assert served == REQUESTS
    assert waited_long <= 1, f"{waited_long} requests waited over 0.3 s inside the engine"
    assert waited / served < 0.05
