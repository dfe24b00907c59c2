"""A client that leaves is charged the work the engine did: the prefill of its whole prompt and
the tokens relayed before it left, through the same books as a finished request."""

import asyncio
import contextlib
import dataclasses

import httpx
import pytest

from fairness.accounting import usage
from fairness.gateway import abandoned_work
from fairness.models import ApiKey, Budget, UsageRecord
from fairness.scheduling.directory import ReplicaInfo
from fairness.store.redis_clients import redis_sync
from fairness.telemetry import budget_status
from tests.support.accounts import live_usage
from tests.support.cast import EMBEDDING_MODEL, MODEL
from tests.support.polling import wait_for
from tests.support.usage_records import recorded

# About 1,900 prompt tokens and room for 2,000 more: a prefill worth charging, and an answer long
# enough to leave before, inside the engine's 4,096 context.
STORY = "Once upon a time a lab shared one card among many people. " * 130
LONG = {
    "model": MODEL,
    "messages": [{"role": "user", "content": STORY}],
    "max_tokens": 2000,
    "ignore_eos": True,
}


def running(sim) -> int:
    return sim.stats()["running"] + sim.stats()["waiting"]



def engine_count(sim, body) -> int:
    """The engine's own count of this prompt, asked of it directly."""
    return httpx.post(sim.url + "/tokenize", json=body, timeout=5).json()["count"]


def association(member) -> str:
    return str(ApiKey.objects.get(pk=member.key_id).membership_id)


def test_a_stream_cut_after_its_first_token_is_charged_its_whole_prompt(gateway, replica, cast, sim):
    prefilled = sim.stats()["prompt_tokens"]
    headers = {"authorization": f"Bearer {cast['alice'].secret}"}
    with httpx.stream(
        "POST", gateway.url + "/v1/chat/completions", json={**LONG, "stream": True}, headers=headers, timeout=30
    ) as response:
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        assert next(line for line in response.iter_lines() if '"content"' in line)
    wait_for(lambda: running(sim) == 0, timeout=5, what="the engine to drop the request")
    prefilled = sim.stats()["prompt_tokens"] - prefilled  # what the engine counted as it ran it

    record = recorded(request_id)
    assert record.status == 499
    assert prefilled > 1500 and abs(record.prompt_tokens - prefilled) <= 0.1 * prefilled
    assert record.prompt_count_source == "tokenize"
    assert 0 < record.completion_tokens < 2000 and record.completion_count_source == "events"
    # Fair share charged it as it charges a finished request, in the release that sent the record.
    charged = live_usage()[0][association(cast["alice"])]
    assert charged == pytest.approx(record.prompt_tokens + 2 * record.completion_tokens, rel=0.01)


def test_a_whole_answer_abandoned_is_charged_its_prompt_and_an_estimate_of_its_decode(gateway, replica, cast, sim):
    budget = Budget.objects.create(key_id=cast["bob"].key_id, tokens=1_000_000, period=Budget.Period.DAY)
    headers = {"authorization": f"Bearer {cast['bob'].secret}"}
    with contextlib.suppress(httpx.ReadTimeout):  # the client gives up, closing its connection
        httpx.post(gateway.url + "/v1/chat/completions", json=LONG, headers=headers, timeout=1.0)
    wait_for(lambda: running(sim) == 0, timeout=5, what="the engine to drop the request")

    def bobs():
        usage.flush(redis_sync())
        return UsageRecord.objects.filter(key_id=cast["bob"].key_id).first()

    record = wait_for(bobs, what="bob's usage record")
    expected = engine_count(sim, {"model": MODEL, "messages": LONG["messages"]})
    assert record.status == 499 and abs(record.prompt_tokens - expected) <= 0.1 * expected
    assert record.prompt_count_source == "tokenize"
    # How many it decoded is estimated (test_abandoned_decode_charged.py); charged as any request.
    assert 0 <= record.completion_tokens <= 2000 and record.completion_count_source == "estimate"
    charged = live_usage()[0][association(cast["bob"])]
    weighted = record.prompt_tokens + 2 * record.completion_tokens
    assert charged == pytest.approx(weighted, rel=0.01)
    assert budget_status.status_of([budget])[0].used == pytest.approx(weighted, rel=0.01)


def test_a_finished_request_says_its_counts_are_the_engines(gateway, replica, cast):
    headers = {"authorization": f"Bearer {cast['alice'].secret}"}
    response = httpx.post(gateway.url + "/v1/chat/completions", headers=headers, timeout=30,
                          json={**LONG, "max_tokens": 4})
    assert response.status_code == 200
    record = recorded(response.headers["x-request-id"])
    assert record.prompt_tokens == response.json()["usage"]["prompt_tokens"]
    assert (record.prompt_count_source, record.completion_count_source) == ("engine", "engine")


# The prompt's count when no engine gives one.

UNREACHABLE = ReplicaInfo(
    id=1,
    name="gone",
    base_url="http://127.0.0.1:9",
    model=MODEL,
    engine_kind="vllm",
    max_num_seqs=8,
    priority_policy=False,
    api_key="",
)


def test_without_an_engine_count_the_prompt_is_estimated_at_the_measured_ratio():
    calibration = abandoned_work.PromptCalibration()
    assert calibration.estimate(4000) == 1000  # the stated default, four bytes a token
    calibration.observe(30_000, 10_000)  # this deployment's prompts: three bytes a token
    counted = asyncio.run(abandoned_work.count_prompt(
        UNREACHABLE, "chat", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, 3000,
        estimate=calibration, timeout=1.0,
    ))
    assert counted == (1000, "estimate")


def test_a_prompt_of_token_ids_counts_itself():
    counted = asyncio.run(abandoned_work.count_prompt(UNREACHABLE, "completions", {"prompt": [5, 6, 7]}, 40))
    assert counted == (3, "prompt_ids")


def test_embedding_inputs_of_token_ids_count_themselves():
    def counted(inputs) -> tuple[int, str]:
        return asyncio.run(abandoned_work.count_prompt(UNREACHABLE, "embeddings", {"input": inputs}, 40))

    assert counted([5, 6, 7]) == (3, "prompt_ids")
    assert counted([[5, 6], [7]]) == (3, "prompt_ids")
    assert counted(["several", "texts"])[1] == "estimate"  # one /tokenize call each would be too many


def test_an_embedding_of_one_text_is_counted_by_its_engine(embedding_sim):
    replica = dataclasses.replace(UNREACHABLE, base_url=embedding_sim.url, model=EMBEDDING_MODEL)
    for inputs in ("twelve bytes", ["twelve bytes"]):
        counted = asyncio.run(abandoned_work.count_prompt(replica, "embeddings", {"model": EMBEDDING_MODEL,
                                                                               "input": inputs}, 40))
        assert counted == (3, "tokenize")  # enginesim: four bytes a token
