"""Conversation affinity pays off in a real engine's prefix cache."""

import time

from fairness.telemetry.metrics_parser import parse_metrics
from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY

SYSTEM = "You are a careful assistant for a research group. " * 12  # a few 128-token blocks


def prefix_hits(server) -> float:
    return parse_metrics(server.metrics_text(timeout=60), "vllm", time.time()).prefix_cache_hits


def test_a_conversation_warms_only_the_replica_it_is_pinned_to(cast, engine_client, vllm_pair):
    client = engine_client(cast["alice"])
    servers = {"vllm-fcfs": vllm_pair[0], "vllm-priority": vllm_pair[1]}
    before = {name: prefix_hits(server) for name, server in servers.items()}

    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a prefix cache?"}]
    homes = set()
    for index in range(4):
        raw = client.chat.completions.with_raw_response.create(model=TINY, messages=messages, max_tokens=16)
        homes.add(raw.headers["x-gpuportal-replica"])
        reply = raw.parse().choices[0].message.content
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"Go on ({index})."}]

    assert len(homes) == 1
    (home,) = homes
    (other,) = set(servers) - homes
    assert prefix_hits(servers[home]) - before[home] >= 3 * 128  # turns 2-4 reuse at least a block
    assert prefix_hits(servers[other]) == before[other]
