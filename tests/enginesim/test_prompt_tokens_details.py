"""--enable-prompt-tokens-details, as vLLM does it: usage.prompt_tokens_details.cached_tokens
on chat and completions, whole answers and a stream's usage chunk; null without the flag."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from enginesim.process import EngineSimProcess
from tests.support.enginesim import MODEL, chat_body, launch

# 100 bytes a line: 25 tokens; twenty lines, 500 tokens, 31 whole blocks of 16.
LONG = "".join(f"line {n:03} of a system prompt the whole group sends before every question..........\n"
               for n in range(20))


@pytest.fixture(scope="module")
def detailed() -> Iterator[EngineSimProcess]:
    process = launch(8, "--speed", "50", "--enable-prompt-tokens-details")
    yield process
    process.stop()


def final_usage(response: httpx.Response) -> dict[str, Any]:
    if not response.headers["content-type"].startswith("text/event-stream"):
        return response.json()["usage"]
    events = [json.loads(block[6:]) for block in response.text.split("\n\n") if block.startswith("data: {")]
    (last,) = [e for e in events if e.get("usage")]
    return last["usage"]


def ask(sim: EngineSimProcess, client: httpx.Client, path: str, text: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = (chat_body(text, 4) if path == "chat/completions"
                            else {"model": MODEL, "prompt": text, "max_tokens": 4})
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    response = client.post(f"{sim.url}/v1/{path}", json=body)
    assert response.status_code == 200, response.text
    return final_usage(response)


@pytest.mark.parametrize("path", ["chat/completions", "completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_repeated_prompt_reports_the_blocks_it_found_cached(detailed, client, path, stream):
    text = f"{path} {stream}\n{LONG}"  # a prefix no other case shares
    cold = ask(detailed, client, path, text, stream)
    warm = ask(detailed, client, path, text, stream)
    assert cold["prompt_tokens_details"] == {"cached_tokens": 0}
    cached = warm["prompt_tokens_details"]["cached_tokens"]
    # Whole blocks only, and never the prompt's last token (vLLM always computes one).
    assert cached % 16 == 0 and warm["prompt_tokens"] - 16 <= cached < warm["prompt_tokens"]


def test_without_the_flag_the_details_are_null(sim, client):
    for _ in range(2):
        assert ask(sim, client, "chat/completions", LONG, stream=False)["prompt_tokens_details"] is None
    assert ask(sim, client, "completions", LONG, stream=True)["prompt_tokens_details"] is None
