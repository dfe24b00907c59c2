"""vLLM started with --enable-prompt-tokens-details reports the prompt tokens its prefix cache
held; the gateway records them on the usage row and charges them at the cached weight."""

import time

from django.conf import settings

from fairness.scheduling import fair_share
from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.support.usage_records import recorded

# 364 tokens of the tiny model's tokenizer: two whole 128-token blocks and some.
SYSTEM = "budget memory cache prefix prompt stream reply message history session engine worker " * 30



def test_a_repeated_long_prompt_is_recorded_with_the_tokens_vllm_had_cached(cast, engine_client):
    client = engine_client(cast["alice"])
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Why? ({time.time()})"}]
    answers = [client.chat.completions.with_raw_response.create(model=TINY, messages=messages, max_tokens=8)
               for _ in range(2)]
    # Conversation affinity sends the second to the replica that holds the first's blocks.
    assert answers[0].headers["x-gpuportal-replica"] == answers[1].headers["x-gpuportal-replica"]
    cold, warm = (recorded(a.headers["x-request-id"]) for a in answers)
    assert warm.cached_tokens >= 256 and warm.cached_tokens < warm.prompt_tokens
    assert warm.cached_tokens == answers[1].parse().usage.prompt_tokens_details.cached_tokens
    assert cold.cached_tokens < warm.cached_tokens
    charged = [fair_share.weighted_tokens(r.prompt_tokens, r.completion_tokens, settings.GP_FAIRSHARE_WEIGHT_PROMPT,
                                          settings.GP_FAIRSHARE_WEIGHT_COMPLETION, cached=r.cached_tokens,
                                          w_cached=settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT)
               for r in (cold, warm)]
    assert charged[1] < 0.5 * charged[0]
