"""--instant: immediate answers with exactly max_tokens tokens, counters still counted."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from enginesim.process import EngineSimProcess
from tests.support.enginesim import MODEL, chat_body, launch, stats

from .test_api import sse_events


@pytest.fixture(scope="module")
def instant() -> Iterator[EngineSimProcess]:
    with launch(4, "--instant") as handle:
        yield handle


def test_it_answers_with_exactly_max_tokens_tokens(instant: EngineSimProcess) -> None:
    for extra in ({"ignore_eos": True}, {}):  # no early stop here: replies are all one size
        body = httpx.post(f"{instant.url}/v1/chat/completions",
                          json=chat_body(max_tokens=50, **extra)).json()
        assert body["usage"]["completion_tokens"] == 50
        assert body["choices"][0]["finish_reason"] == "length"


def test_it_streams_every_chunk_then_usage_and_done(instant: EngineSimProcess) -> None:
    response = httpx.post(f"{instant.url}/v1/chat/completions", json=chat_body(
        max_tokens=12, ignore_eos=True, stream=True, stream_options={"include_usage": True}))
    events = sse_events(response.text)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len(events) == 1 + 12 + 1 + 1  # role, tokens, usage, [DONE]
    assert events[-2]["usage"]["completion_tokens"] == 12


def test_it_still_counts_tokens_and_requests(instant: EngineSimProcess) -> None:
    before = stats(instant)
    client = openai.OpenAI(base_url=instant.base_url, api_key="x", max_retries=0)
    client.completions.create(model=MODEL, prompt="abcdefgh", max_tokens=5,
                              extra_body={"ignore_eos": True})
    after = stats(instant)
    assert after["total_requests"] - before["total_requests"] == 1
    assert after["prompt_tokens"] - before["prompt_tokens"] == 2
    assert after["generation_tokens"] - before["generation_tokens"] == 5
    assert after["running"] == 0 and after["waiting"] == 0
    assert "vllm:generation_tokens_total" in httpx.get(f"{instant.url}/metrics").text


def test_errors_are_the_same_as_in_timed_mode(instant: EngineSimProcess) -> None:
    response = httpx.post(f"{instant.url}/v1/chat/completions",
                          json={**chat_body(), "model": "other"})
    assert response.status_code == 404
