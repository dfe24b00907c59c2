import json

import pytest

from fairness.gateway.errors import ApiError
from fairness.gateway.request_parsing import CHAT, COMPLETIONS, parse, upstream_body

CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("body", "endpoint", "param", "code"),
    [
        (b"{not json", CHAT, None, "invalid_json"),
        (b"[1, 2]", CHAT, None, "invalid_json"),
        (b"\xff\xfe", CHAT, None, "invalid_json"),
        (json.dumps({"messages": []}).encode(), CHAT, "model", "missing_required_parameter"),
        (json.dumps({**CHAT_BODY, "model": 7}).encode(), CHAT, "model", "invalid_type"),
        (json.dumps({**CHAT_BODY, "stream": "yes"}).encode(), CHAT, "stream", "invalid_type"),
        (json.dumps({"model": "m"}).encode(), CHAT, "messages", "missing_required_parameter"),
        (json.dumps({"model": "m", "messages": "hi"}).encode(), CHAT, "messages", "invalid_type"),
        (json.dumps({"model": "m", "messages": ["hi"]}).encode(), CHAT, "messages", "invalid_type"),
        (json.dumps({**CHAT_BODY, "max_tokens": "10"}).encode(), CHAT, "max_tokens", "invalid_type"),
        (json.dumps({**CHAT_BODY, "max_tokens": 0}).encode(), CHAT, "max_tokens", "invalid_type"),
        (json.dumps({**CHAT_BODY, "max_tokens": True}).encode(), CHAT, "max_tokens", "invalid_type"),
        (json.dumps({"model": "m"}).encode(), COMPLETIONS, "prompt", "missing_required_parameter"),
        (json.dumps({"model": "m", "prompt": 5}).encode(), COMPLETIONS, "prompt", "invalid_type"),
        (json.dumps({**CHAT_BODY, "n": 2}).encode(), CHAT, "n", "unsupported_value"),
        (json.dumps({"model": "m", "prompt": "x", "best_of": 3}).encode(), COMPLETIONS, "best_of", "unsupported_value"),
        (json.dumps({"model": "m", "prompt": ["a", "b"]}).encode(), COMPLETIONS, "prompt", "unsupported_value"),
        (json.dumps({"model": "m", "prompt": [[1, 2], [3]]}).encode(), COMPLETIONS, "prompt", "unsupported_value"),
    ],
)
def test_it_rejects_bad_bodies_with_a_400_naming_the_field(body, endpoint, param, code):
    with pytest.raises(ApiError) as caught:
        parse(body, endpoint)
    error = caught.value
    assert (error.status, error.param, error.code) == (400, param, code)
    assert error.body()["error"]["type"] == "invalid_request_error"


def test_it_forwards_the_clients_own_bytes_when_nothing_changes():
    raw = b'{"model": "m",   "messages": [{"role": "user", "content": "hi"}]}'
    assert upstream_body(parse(raw, CHAT), raw, None) is raw


def test_it_asks_for_usage_on_streams_and_remembers_the_client_did_not():
    raw = json.dumps({**CHAT_BODY, "stream": True}).encode()
    request = parse(raw, CHAT)
    assert not request.wants_usage
    sent = json.loads(upstream_body(request, raw, None))
    assert sent["stream_options"] == {"include_usage": True}


def test_it_sets_the_tiers_engine_priority_and_ignores_the_clients():
    raw = json.dumps({**CHAT_BODY, "priority": -100}).encode()
    assert json.loads(upstream_body(parse(raw, CHAT), raw, 10))["priority"] == 10
    assert "priority" not in json.loads(upstream_body(parse(raw, CHAT), raw, None))


@pytest.mark.parametrize("prompt", ["one", ["one"], [1, 2, 3], [[1, 2, 3]]])
def test_one_prompt_in_any_of_its_forms_and_n_of_one_pass(prompt):
    parsed = parse(json.dumps({"model": "m", "prompt": prompt, "n": 1, "best_of": 1}).encode(), COMPLETIONS)
    assert parsed.payload["prompt"] == prompt

