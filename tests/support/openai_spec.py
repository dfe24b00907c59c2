"""Bodies checked against OpenAI's own OpenAPI document: the schemas vendored in
tests/fixtures/openai_schemas.json (scripts/vendor_openai_schemas.py), by jsonschema-rs."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema_rs

SCHEMAS = Path(__file__).resolve().parent.parent / "fixtures" / "openai_schemas.json"


@functools.cache
def _validator(name: str) -> Any:
    document = json.loads(SCHEMAS.read_text())
    return jsonschema_rs.Draft202012Validator({**document, "$ref": f"#/components/schemas/{name}"})


def violations(body: Any, schema: str) -> list[str]:
    """Where `body` breaks OpenAI's schema `schema` ("Batch", "OpenAIFile", ...): "path: what"."""
    return [f"{'/'.join(map(str, error.instance_path)) or '(body)'}: {error.message}"
            for error in _validator(schema).iter_errors(body)]


def assert_matches(body: Any, schema: str) -> None:
    broken = violations(body, schema)
    assert not broken, f"{schema}: {broken}"


# Where vLLM 0.32's bodies break OpenAI's schemas, read from its answers (the real tier's test
# holds this list to them): fields it leaves unset are sent as null where the document allows no
# null. enginesim mirrors vLLM's bodies, these included, since clients meet vLLM's, not the
# document's; the OpenAI SDK reads such a null as an absent field.
VLLM_DEVIATIONS = frozenset({
    'choices/0/message/annotations: null is not of type "array"',
    'choices/0/message/function_call: null is not of type "object"',
    'usage/prompt_tokens_details: null is not of type "object"',  # without --enable-prompt-tokens-details
    'usage/completion_tokens_details: null is not of type "object"',
})


def assert_matches_as_vllm(body: Any, schema: str) -> set[str]:
    """The body matches the schema but for vLLM's known deviations; returns those it shows."""
    broken = set(violations(body, schema))
    assert not broken - VLLM_DEVIATIONS, f"{schema}: {sorted(broken - VLLM_DEVIATIONS)}"
    return broken


def assert_generation_bodies_match_as_vllm(gateway, secret: str, chat: dict[str, Any]) -> set[str]:
    """A chat, a completion and a chat's stream chunks, asked through the gateway, match their
    schemas but for vLLM's known deviations; returns those the whole chat showed."""
    from tests.support.v1_calls import post

    answer = post(gateway, secret, chat)
    assert answer.status_code == 200, answer.text
    shown = assert_matches_as_vllm(answer.json(), "CreateChatCompletionResponse")
    completion = post(gateway, secret, {"model": chat["model"], "prompt": "Once", "max_tokens": 4},
                      path="/v1/completions")
    assert_matches_as_vllm(completion.json(), "CreateCompletionResponse")
    streamed = post(gateway, secret, {**chat, "stream": True, "stream_options": {"include_usage": True}})
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    assert len(chunks) >= 3
    for chunk in chunks:
        assert_matches_as_vllm(chunk, "CreateChatCompletionStreamResponse")
    return shown
