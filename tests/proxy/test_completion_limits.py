"""The completion limit is read as vLLM reads it, per endpoint, and a budget's limit is written
into the field the engine obeys."""

import json

import pytest

from fairness.gateway.lifecycle import completion_ask, request_estimate
from fairness.gateway.request_parsing import CHAT, COMPLETIONS, EMBEDDINGS, completion_limit, parse, upstream_body

CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
PROMPT_BODY = {"model": "m", "prompt": "hi"}


@pytest.mark.parametrize(("endpoint", "fields", "limit"), [
    (CHAT, {}, None),  # to the end of the context
    (CHAT, {"max_tokens": 7}, 7),
    (CHAT, {"max_completion_tokens": 2000, "max_tokens": 1}, 2000),  # the deprecated field yields
    (CHAT, {"max_completion_tokens": 5, "max_tokens": 2000}, 5),
    (CHAT, {"max_completion_tokens": None, "max_tokens": 9}, 9),
    (COMPLETIONS, {}, 16),  # vLLM's default for completions
    (COMPLETIONS, {"max_tokens": None}, None),
    (COMPLETIONS, {"max_completion_tokens": 1, "max_tokens": 2000}, 2000),  # the engine ignores the first
    (COMPLETIONS, {"max_completion_tokens": 1}, 16),
])
def test_the_limit_is_the_one_the_engine_obeys(endpoint, fields, limit):
    body = {**(CHAT_BODY if endpoint == CHAT else PROMPT_BODY), **fields}
    assert completion_limit(parse(json.dumps(body).encode(), endpoint)) == limit


def test_the_estimate_of_split_fields_on_completions_counts_the_field_the_engine_runs_to():
    raw = json.dumps({**PROMPT_BODY, "max_completion_tokens": 1, "max_tokens": 2000}).encode()
    assert request_estimate(parse(raw, COMPLETIONS), len(raw)) == len(raw) // 4 + 2 * 2000


def test_a_request_that_names_no_limit_asks_for_what_the_context_leaves(settings):
    settings.GP_MODEL_CONTEXT_TOKENS = 1000
    raw = json.dumps(CHAT_BODY).encode()
    ask = completion_ask(parse(raw, CHAT), len(raw))
    assert ask.most == 1000 - len(raw) // 4 and ask.least == 16 and ask.prompt == len(raw) // 4


@pytest.mark.parametrize(("endpoint", "fields", "sent"), [
    (CHAT, {}, {"max_completion_tokens": 300}),
    (CHAT, {"max_tokens": 2000}, {"max_completion_tokens": 300, "max_tokens": 300}),
    (CHAT, {"max_tokens": 10, "max_completion_tokens": 900}, {"max_completion_tokens": 300, "max_tokens": 10}),
    (COMPLETIONS, {"max_completion_tokens": 1, "max_tokens": 2000}, {"max_tokens": 300, "max_completion_tokens": 1}),
    (COMPLETIONS, {"max_completion_tokens": 900}, {"max_tokens": 300, "max_completion_tokens": 300}),
])
def test_the_budgets_limit_is_written_where_the_engine_reads_it(endpoint, fields, sent):
    raw = json.dumps({**(CHAT_BODY if endpoint == CHAT else PROMPT_BODY), **fields}).encode()
    body = json.loads(upstream_body(parse(raw, endpoint), raw, None, max_completion=300))
    assert {k: body.get(k) for k in sent} == sent
    assert {k for k in ("max_tokens", "max_completion_tokens") if k in body} == set(sent)


def test_an_embedding_asks_its_budgets_for_its_prompt_alone():
    raw = json.dumps({"model": "m", "input": ["one passage", "another"]}).encode()
    embedding = parse(raw, EMBEDDINGS)
    assert completion_ask(embedding, len(raw)) is None
    assert request_estimate(embedding, len(raw)) == len(raw) // 4
