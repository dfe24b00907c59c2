"""The OpenAI-compatible endpoints, as a vLLM client sees them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from enginesim.process import EngineSimProcess
from tests.support.enginesim import MODEL, chat_body, launch


def sse_events(text: str) -> list[Any]:
    """Parse an SSE body strictly: only ``data: ...`` lines separated by blank lines."""
    assert text.endswith("data: [DONE]\n\n")
    events: list[Any] = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_health_version_and_models(sim: EngineSimProcess, client: httpx.Client) -> None:
    health = client.get(f"{sim.url}/health")
    assert health.status_code == 200 and health.content == b""
    assert "version" in client.get(f"{sim.url}/version").json()
    models = client.get(f"{sim.url}/v1/models").json()
    assert models["object"] == "list"
    [card] = models["data"]
    assert card["id"] == MODEL and card["owned_by"] == "vllm" and card["max_model_len"] == 4096


def test_chat_completion_returns_content_and_usage(sim: EngineSimProcess,
                                                   client: httpx.Client) -> None:
    body = client.post(f"{sim.url}/v1/chat/completions",
                       json=chat_body(max_tokens=7, ignore_eos=True)).json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    [choice] = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert len(choice["message"]["content"].split()) == 7
    assert choice["finish_reason"] == "length"
    usage = body["usage"]
    assert usage["completion_tokens"] == 7
    assert usage["total_tokens"] == usage["prompt_tokens"] + 7
    # ChatML-rendered prompt at 4 bytes per token.
    rendered = "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
    assert usage["prompt_tokens"] == -(-len(rendered.encode()) // 4)


def test_without_ignore_eos_it_may_stop_early_and_says_so(sim: EngineSimProcess,
                                                          client: httpx.Client) -> None:
    reasons = set()
    for i in range(12):
        body = client.post(f"{sim.url}/v1/chat/completions",
                           json=chat_body(f"prompt {i}", max_tokens=6)).json()
        n, reason = body["usage"]["completion_tokens"], body["choices"][0]["finish_reason"]
        assert 1 <= n <= 6
        assert reason == ("length" if n == 6 else "stop")
        reasons.add(reason)
        again = client.post(f"{sim.url}/v1/chat/completions",
                            json=chat_body(f"prompt {i}", max_tokens=6)).json()
        assert again["choices"][0]["message"] == body["choices"][0]["message"]  # deterministic
    assert "stop" in reasons


def test_max_tokens_defaults_to_sixteen(sim: EngineSimProcess, client: httpx.Client) -> None:
    body = {"model": MODEL, "prompt": "Once upon a time", "ignore_eos": True}
    assert client.post(f"{sim.url}/v1/completions", json=body).json()["usage"][
        "completion_tokens"] == 16


def test_chat_stream_is_sse_like_vllm_with_a_final_usage_chunk(sim: EngineSimProcess,
                                                               client: httpx.Client) -> None:
    payload = chat_body(max_tokens=5, ignore_eos=True, stream=True,
                        stream_options={"include_usage": True})
    response = client.post(f"{sim.url}/v1/chat/completions", json=payload)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content_chunks = chunks[1:-1]
    assert len(content_chunks) == 5
    assert [c["choices"][0]["finish_reason"] for c in content_chunks] == [None] * 4 + ["length"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    streamed = "".join(c["choices"][0]["delta"]["content"] for c in content_chunks)
    whole = client.post(f"{sim.url}/v1/chat/completions",
                        json=chat_body(max_tokens=5, ignore_eos=True)).json()
    assert streamed == whole["choices"][0]["message"]["content"]


def test_stream_without_usage_option_has_no_usage_chunk(sim: EngineSimProcess,
                                                        client: httpx.Client) -> None:
    response = client.post(f"{sim.url}/v1/completions", json={
        "model": MODEL, "prompt": "abc", "max_tokens": 3, "ignore_eos": True, "stream": True})
    chunks = sse_events(response.text)[:-1]
    assert len(chunks) == 3
    assert all("usage" not in c and c["object"] == "text_completion" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_completions_accept_text_and_token_id_prompts(sim: EngineSimProcess,
                                                      client: httpx.Client) -> None:
    body = client.post(f"{sim.url}/v1/completions", json={
        "model": MODEL, "prompt": [1, 2, 3, 4, 5], "max_tokens": 4, "ignore_eos": True}).json()
    assert body["object"] == "text_completion"
    assert body["usage"] == {"prompt_tokens": 5, "total_tokens": 9, "completion_tokens": 4,
                             "prompt_tokens_details": None, "completion_tokens_details": None}
    assert len(body["choices"][0]["text"].split()) == 4


def test_the_openai_sdk_works_against_it(sim: EngineSimProcess) -> None:
    client = openai.OpenAI(base_url=sim.base_url, api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == [MODEL]
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
        extra_body={"ignore_eos": True})
    assert reply.usage is not None and reply.usage.completion_tokens == 4
    assert reply.choices[0].message.content
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reply.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    completion = client.completions.create(model=MODEL, prompt="hi", max_tokens=3,
                                           extra_body={"ignore_eos": True})
    assert completion.usage is not None and completion.usage.completion_tokens == 3


def test_unknown_model_is_a_404_in_openai_shape(sim: EngineSimProcess,
                                                client: httpx.Client) -> None:
    response = client.post(f"{sim.url}/v1/chat/completions",
                           json={**chat_body(), "model": "nope"})
    assert response.status_code == 404
    assert response.json() == {"error": {"message": "The model `nope` does not exist.",
                                         "type": "NotFoundError", "param": None, "code": 404}}
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(base_url=sim.base_url, api_key="x", max_retries=0).completions.create(
            model="nope", prompt="hi")


def test_an_over_long_request_is_a_400_like_vllm(sim: EngineSimProcess,
                                                 client: httpx.Client) -> None:
    response = client.post(f"{sim.url}/v1/completions",
                           json={"model": MODEL, "prompt": "word " * 3200, "max_tokens": 200})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400
    assert error["message"].startswith("This model's maximum context length is 4096 tokens.")
    assert "(4000 in the messages, 200 in the completion)" in error["message"]
    no_room = client.post(f"{sim.url}/v1/completions",
                          json={"model": MODEL, "prompt": "word " * 3300})
    assert no_room.status_code == 400


def test_malformed_requests_are_400s(sim: EngineSimProcess, client: httpx.Client) -> None:
    url = f"{sim.url}/v1/chat/completions"
    for content in (b"{not json", b"[1, 2]"):
        response = client.post(url, content=content)
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "BadRequestError"
    assert client.post(url, json={"model": MODEL, "messages": []}).status_code == 400
    assert client.post(url, json=chat_body(max_tokens=0)).status_code == 400
    assert client.post(url, json=chat_body(max_tokens="3")).status_code == 400
    assert client.post(url, json=chat_body(n=2)).status_code == 400
    assert client.post(url, json=chat_body(stream_options={"include_usage": True})
                       ).status_code == 400  # stream options without stream, as vLLM


def test_priority_is_accepted_and_ignored_under_fcfs(sim: EngineSimProcess,
                                                     client: httpx.Client) -> None:
    response = client.post(f"{sim.url}/v1/chat/completions", json=chat_body(priority=7))
    assert response.status_code == 200


def test_unknown_paths_are_404s(sim: EngineSimProcess, client: httpx.Client) -> None:
    assert client.get(f"{sim.url}/v1/nothing").status_code == 404
    assert client.get(f"{sim.url}/v1/chat/completions").status_code == 405


def test_an_api_key_is_required_on_v1_when_configured() -> None:
    with launch(2, "--speed", "10", "--api-key", "sekret") as sim:
        url = f"{sim.url}/v1/chat/completions"
        denied = httpx.post(url, json=chat_body())
        assert denied.status_code == 401 and denied.json()["error"]["code"] == 401
        wrong = httpx.post(url, json=chat_body(), headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = httpx.post(url, json=chat_body(), headers={"Authorization": "Bearer sekret"})
        assert ok.status_code == 200
        assert httpx.get(f"{sim.url}/health").status_code == 200  # probes stay open
        assert httpx.get(f"{sim.url}/metrics").status_code == 200
        sdk = openai.OpenAI(base_url=sim.base_url, api_key="sekret", max_retries=0)
        assert sdk.chat.completions.create(model=MODEL, messages=[{"role": "user",
                                                                  "content": "x"}]).choices
