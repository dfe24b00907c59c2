"""The gateway holds the queue, not the engine: a real vLLM never sees more than its slots."""

import asyncio

import httpx
from django.contrib.auth import get_user_model
from prometheus_client.parser import text_string_to_metric_families

from fairness.models import Replica
from fairness.portal.keys import issue_key
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


def test_sixteen_requests_on_eight_slots_queue_in_the_gateway(gateway, tiers, vllm_pair):
    engine = vllm_pair[0]
    Replica.objects.create(name="vllm-fcfs", base_url=engine.base_url, model=TINY, max_num_seqs=8)
    secrets = []
    for index in range(8):
        user = get_user_model().objects.create(username=f"researcher-{index}")
        secrets.append(issue_key(user, tiers["interactive"])[1])
    before = queue_time(engine.metrics_text(timeout=60))

    async def burst():
        async with httpx.AsyncClient(timeout=300) as client:
            # Each key checked once first, so the sixteen reach the queue together: on two cores
            # running two engines, a key's first lookup in the database (on the gateway's one
            # database thread) took seconds, and requests let in after the first eight ended
            # rightly found a free slot.
            for secret in secrets:
                known = await client.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {secret}"})
                assert known.status_code == 200

            def send(secret: str, tokens: int):
                body = {"model": TINY, "prompt": "Once upon a time", "max_tokens": tokens, "ignore_eos": True}
                return asyncio.create_task(client.post(
                    gateway.url + "/v1/completions", json=body, headers={"authorization": f"Bearer {secret}"}
                ))

            # All sixteen at once. No state in between is polled for: the tiny model answers within
            # seconds, and on two cores busy with the engine a poll can miss a state that brief.
            tasks = [send(secret, FIRST_TOKENS if index < 4 else SECOND_TOKENS)
                     for index, secret in enumerate(secrets) for _ in range(2)]
            return await asyncio.gather(*tasks)

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * 16
    assert [r.json()["usage"]["completion_tokens"] for r in responses] == [FIRST_TOKENS] * 8 + [SECOND_TOKENS] * 8
    # Eight slots: whichever eight the gateway let through first, the other eight waited in it.
    assert sum(int(r.headers["x-gpuportal-queued-ms"]) > 0 for r in responses) >= 8

    after = queue_time(engine.metrics_text(timeout=60))
    served, waited, waited_long = (a - b for a, b in zip(after, before, strict=True))
    assert served == 16
    assert waited_long <= 1, f"{waited_long} requests waited over 0.3 s inside the engine"
    assert waited / served < 0.05
