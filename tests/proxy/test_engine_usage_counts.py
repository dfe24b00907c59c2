"""An engine's usage counts are not trusted: what is not a count is 0, a negative count is 0 (it
would credit the key's budget and fair share), and a huge one is held to what the records hold.
Every such answer still reaches its client, and its usage record is written."""

from __future__ import annotations

import httpx
import pytest

from fairness.accounting import usage
from fairness.gateway.sse_relay import MOST_TOKENS, StreamTally
from fairness.models import Replica, UsageRecord
from fairness.store.redis_clients import redis_sync
from tests.proxy.test_engine_answer_caps import VerboseEngine
from tests.support.cast import MODEL
from tests.support.processes import start_gateway

HOSTILE = [
    ({"prompt_tokens": -5, "completion_tokens": -1}, (0, 0)),
    ({"prompt_tokens": "many", "completion_tokens": [3]}, (0, 0)),
    ({"prompt_tokens": 10**30, "completion_tokens": 2.5}, (MOST_TOKENS, 2)),
    ({"prompt_tokens": True, "completion_tokens": None}, (0, 0)),
    ([1, 2], (0, 0)),
]


@pytest.mark.parametrize(("reported", "counted"), HOSTILE)
def test_the_tally_takes_only_counts(reported, counted):
    tally = StreamTally()
    tally.take_usage(reported)
    assert (tally.prompt_tokens, tally.completion_tokens) == counted


# Anthropic's names (the Messages route): its input_tokens leave out what was read from or written
# to the cache, which the engine still ran, so the prompt charged is their sum. The Responses API
# uses the same two names, and counts the cached tokens within input_tokens.
ANTHROPIC = [
    ({"input_tokens": 30, "output_tokens": 7}, (30, 7, 0)),
    ({"input_tokens": 10, "output_tokens": 7, "cache_read_input_tokens": 20}, (30, 7, 20)),
    ({"input_tokens": 10, "output_tokens": 7, "cache_read_input_tokens": None, "cache_creation_input_tokens": 5},
     (15, 7, 0)),
    ({"input_tokens": -10, "output_tokens": "x", "cache_read_input_tokens": -3}, (0, 0, 0)),
    ({"input_tokens": 10**30, "output_tokens": 1, "cache_read_input_tokens": 10**30}, (MOST_TOKENS, 1, MOST_TOKENS)),
    # The Responses API's: input_tokens hold the cached ones, which input_tokens_details names.
    ({"input_tokens": 30, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 12}}, (30, 7, 12)),
    ({"input_tokens": 30, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 99}}, (30, 7, 30)),
    ({"input_tokens": 30, "output_tokens": 7, "input_tokens_details": None}, (30, 7, 0)),
]


@pytest.mark.parametrize(("reported", "counted"), ANTHROPIC)
def test_the_tally_reads_input_and_output_usage_as_the_prompt_the_engine_ran(reported, counted):
    tally = StreamTally()
    tally.take_usage(reported)
    assert (tally.prompt_tokens, tally.completion_tokens, tally.cached_tokens) == counted


def test_answers_with_hostile_counts_reach_their_clients_and_are_recorded_within_bounds(
    live_db_url, redis_url, cast
):
    engine = VerboseEngine(size=0)
    Replica.objects.create(name="hostile", base_url=f"http://127.0.0.1:{engine.port}", model=MODEL)
    gateway = start_gateway(live_db_url, name="hostile-counts")
    headers = {"authorization": f"Bearer {cast['alice'].secret}"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    try:
        for reported, _ in HOSTILE:
            engine.usage = reported
            answer = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
            assert answer.status_code == 200, answer.text
    finally:
        gateway.stop()
        engine.close()
    usage.flush(redis_sync())
    recorded = sorted(UsageRecord.objects.values_list("prompt_tokens", "completion_tokens"))
    assert recorded == sorted(counted for _, counted in HOSTILE)
