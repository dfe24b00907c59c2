"""POST /tokenize, as vLLM answers it: the prompt's count without generating."""

from __future__ import annotations

import httpx

from enginesim.process import EngineSimProcess
from tests.support.enginesim import MODEL, chat_body


def test_tokenize_counts_a_chat_as_its_generation_does(sim: EngineSimProcess, client: httpx.Client) -> None:
    body = chat_body("A question worth a few tokens, and then some more words. " * 20)
    answered = client.post(f"{sim.url}/v1/chat/completions", json=body).json()
    counted = client.post(f"{sim.url}/tokenize", json={"model": MODEL, "messages": body["messages"]})
    assert counted.status_code == 200
    shape = counted.json()
    assert set(shape) == {"count", "max_model_len", "tokens", "token_strs"}
    assert shape["count"] == answered["usage"]["prompt_tokens"] == len(shape["tokens"])
    assert shape["max_model_len"] == 4096 and shape["token_strs"] is None


def test_tokenize_counts_a_completions_prompt(sim: EngineSimProcess, client: httpx.Client) -> None:
    prompt = "Twelve bytes" * 10
    answered = client.post(f"{sim.url}/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 2})
    counted = client.post(f"{sim.url}/tokenize", json={"model": MODEL, "prompt": prompt}).json()
    assert counted["count"] == answered.json()["usage"]["prompt_tokens"] == 30


def test_tokenize_refuses_what_it_cannot_count(sim: EngineSimProcess, client: httpx.Client) -> None:
    for body, status in (({"model": MODEL}, 400), ({"model": "other", "prompt": "x"}, 404), ([1], 400)):
        refused = client.post(f"{sim.url}/tokenize", json=body)
        assert refused.status_code == status
        assert set(refused.json()["error"]) == {"message", "type", "param", "code"}
