"""Checks a client's request body before anything is queued or forwarded.

Only what the gateway relies on is checked here; the engine validates the rest and its
errors pass through to the client.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from fairness.gateway.errors import ApiError

CHAT = "chat"
COMPLETIONS = "completions"
EMBEDDINGS = "embeddings"
MESSAGES = "messages"  # Anthropic's Messages API, as vLLM serves it
RESPONSES = "responses"  # OpenAI's Responses API, as vLLM serves it
RERANK = "rerank"  # vLLM's /v1/rerank and /v2/rerank (Jina's and Cohere's shapes)
SCORE = "score"  # vLLM's /v1/score
# The endpoints of a pooling model: a prefill of their texts, nothing generated.
POOLING = frozenset({EMBEDDINGS, RERANK, SCORE})
# The documents (or pairs) one rerank or score request may hold, Cohere's limit.
MOST_SCORED_TEXTS = 1000
# What a score request may name its texts as, as vLLM takes them.
SCORE_PAIRS = (("text_1", "text_2"), ("data_1", "data_2"), ("queries", "documents"), ("queries", "items"))
# OpenAI's limit on the inputs of one embeddings request.
MOST_EMBEDDING_INPUTS = 2048


@dataclass
class ProxyRequest:
    payload: dict[str, Any]
    model: str
    stream: bool
    wants_usage: bool  # the client asked for the final usage chunk of a stream
    endpoint: str = CHAT


# /v1/completions runs this many tokens when the body has no max_tokens at all (vLLM's default).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


def completion_limit(request: ProxyRequest) -> int | None:
    """The completion limit the engine obeys, read as vLLM reads it, or None: it runs to the end
    of the context. Chat: max_completion_tokens, else the deprecated max_tokens. Completions:
    max_tokens only (the engine ignores max_completion_tokens there), 16 when absent, and an
    explicit null runs to the end of the context."""
    payload = request.payload
    if request.endpoint in POOLING:
        return 0  # an embedding or a score is the prompt's prefill only
    if request.endpoint == MESSAGES:
        return payload["max_tokens"]  # type: ignore[no-any-return]  # required there, checked
    if request.endpoint == RESPONSES:
        return payload.get("max_output_tokens")
    if request.endpoint == CHAT:
        stated = payload.get("max_completion_tokens")
        return stated if stated is not None else payload.get("max_tokens")
    if "max_tokens" not in payload:
        return COMPLETIONS_DEFAULT_MAX_TOKENS
    return payload["max_tokens"]  # type: ignore[no-any-return]


_ONE_SEQUENCE = ("is not accepted here: the gateway schedules one sequence per request so that each "
                 "counts against your concurrency cap.")


def _invalid(message: str, param: str, code: str = "invalid_type") -> ApiError:
    return ApiError(400, message, code, param=param)


def parse(body: bytes, endpoint: str) -> ProxyRequest:
    # orjson, not json: this runs on the event loop, holding it (and the GIL, so a thread would
    # not help) while it parses, and a body at the size limit made of many small values took the
    # standard library a quarter of a second: every other request of the process waited. orjson
    # is faster, and strict where we need it: it refuses a lone UTF-16 surrogate (an unpaired
    # \ud800-\udfff escape, which no UTF-8 text, the engine's tokenizer or the affinity hash,
    # can hold), NaN and Infinity, and nesting past 1024 levels.
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, _json_error(str(exc)), "invalid_json") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object.", "invalid_json")

    model = payload.get("model")
    if model is None:
        raise _invalid("You must provide a model parameter.", "model", "missing_required_parameter")
    if not isinstance(model, str) or not model:
        raise _invalid("'model' must be a non-empty string.", "model")

    if endpoint == EMBEDDINGS:
        return _embeddings(payload, model)
    if endpoint in (RERANK, SCORE):
        return _scoring(payload, model, endpoint)

    stream = payload.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _invalid("'stream' must be a boolean.", "stream")
    if endpoint == MESSAGES:
        return _messages(payload, model, stream)
    if endpoint == RESPONSES:
        return _responses(payload, model, stream)

    if endpoint == CHAT:
        messages = payload.get("messages")
        if messages is None:
            raise _invalid("'messages' is a required property.", "messages", "missing_required_parameter")
        if not isinstance(messages, list) or not messages:
            raise _invalid("'messages' must be a non-empty array.", "messages")
        if not all(isinstance(m, dict) for m in messages):
            raise _invalid("Each entry of 'messages' must be an object.", "messages")
    else:
        prompt = payload.get("prompt")
        if prompt is None:
            raise _invalid("'prompt' is a required property.", "prompt", "missing_required_parameter")
        if not isinstance(prompt, (str, list)):
            raise _invalid("'prompt' must be a string or an array.", "prompt")

    for name in ("max_tokens", "max_completion_tokens", "n", "best_of"):
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise _invalid(f"'{name}' must be a positive integer.", name)
    # The engine runs each choice and each prompt of a batch as its own sequence, in a slot of
    # its own, while the request holds one lease: a cap of 2 would let a key fill the card.
    # One sequence per request keeps every sequence counted; repeats are queued fairly.
    for name in ("n", "best_of"):
        if (payload.get(name) or 1) > 1:
            raise _invalid(f"'{name}' above 1 {_ONE_SEQUENCE} Send the request once per choice instead.",
                           name, "unsupported_value")
    if endpoint == COMPLETIONS and _prompt_count(payload["prompt"]) > 1:
        raise _invalid(f"A list of several prompts {_ONE_SEQUENCE} Send one request per prompt instead.",
                       "prompt", "unsupported_value")

    _check_sampling_types(payload)

    options = payload.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _invalid("'stream_options' must be an object.", "stream_options")
    wants_usage = bool(options and options.get("include_usage"))
    return ProxyRequest(payload=payload, model=model, stream=stream, wants_usage=wants_usage, endpoint=endpoint)


def _embeddings(payload: dict[str, Any], model: str) -> ProxyRequest:
    """An embeddings request: `input` as OpenAI takes it (a string, strings, token ids, or lists of
    token ids), and the options the gateway forwards, checked for their type. The inputs of one
    request run together on the engine, prefill only, and hold one slot between them."""
    data = payload.get("input")
    if data is None:
        raise _invalid("'input' is a required property.", "input", "missing_required_parameter")
    if isinstance(data, str):
        inputs: list[Any] = [data]
    elif isinstance(data, list) and data:
        inputs = data if not _is_int(data[0]) else [data]
    else:
        raise _invalid("'input' must be a non-empty string or array.", "input")
    if len(inputs) > MOST_EMBEDDING_INPUTS:
        raise _invalid(f"'input' may hold at most {MOST_EMBEDDING_INPUTS} entries; send the rest in "
                       "another request.", "input", "unsupported_value")
    for item in inputs:
        if isinstance(item, str):
            if not item:
                raise _invalid("'input' cannot hold an empty string.", "input", "invalid_value")
        elif not (isinstance(item, list) and item and all(_is_int(i) and i >= 0 for i in item)):
            raise _invalid("'input' must be a string, an array of strings, an array of token ids "
                           "(non-negative integers) or an array of such arrays.", "input")
    encoding = payload.get("encoding_format")
    if encoding is not None and encoding not in ("float", "base64"):
        raise _invalid("'encoding_format' must be 'float' or 'base64'.", "encoding_format", "invalid_value")
    dimensions = payload.get("dimensions")
    if dimensions is not None and (not _is_int(dimensions) or dimensions < 1):
        raise _invalid("'dimensions' must be a positive integer.", "dimensions")
    user = payload.get("user")
    if user is not None and not isinstance(user, str):
        raise _invalid(f"'user' must be a string, not {_json_type(user)}.", "user")
    if payload.get("stream"):
        raise _invalid("Embeddings are not streamed: leave out 'stream'.", "stream", "unsupported_value")
    return ProxyRequest(payload=payload, model=model, stream=False, wants_usage=False, endpoint=EMBEDDINGS)


def _scoring(payload: dict[str, Any], model: str, endpoint: str) -> ProxyRequest:
    """A rerank (a query and its documents) or score (pairs of texts) request. Its texts run
    together on the engine, prefill only, and hold one slot between them, so their number is
    bounded; what each text may be (a string, or vLLM's multimodal parts) is the engine's to judge."""
    if endpoint == RERANK:
        if payload.get("query") is None:
            raise _invalid("'query' is a required property.", "query", "missing_required_parameter")
        names: tuple[str, ...] = ("documents",)
        top_n = payload.get("top_n")
        if top_n is not None and (not _is_int(top_n) or top_n < 0):
            raise _invalid("'top_n' must be a non-negative integer.", "top_n")
    else:
        named = [pair for pair in SCORE_PAIRS if pair[0] in payload and pair[1] in payload]
        if not named:
            raise _invalid("A score request names its texts as 'text_1' and 'text_2' (or 'queries' and "
                           "'documents').", "text_1", "missing_required_parameter")
        names = named[0]
    for name in names:
        texts = payload.get(name)
        if texts is None:
            raise _invalid(f"'{name}' is a required property.", name, "missing_required_parameter")
        if isinstance(texts, list):
            if not texts:
                raise _invalid(f"'{name}' must not be empty.", name)
            if len(texts) > MOST_SCORED_TEXTS:
                raise _invalid(f"'{name}' may hold at most {MOST_SCORED_TEXTS} entries; send the rest in another "
                               "request.", name, "unsupported_value")
    if payload.get("stream"):
        raise _invalid("Scores are not streamed: leave out 'stream'.", "stream", "unsupported_value")
    return ProxyRequest(payload=payload, model=model, stream=False, wants_usage=False, endpoint=endpoint)


def _messages(payload: dict[str, Any], model: str, stream: bool) -> ProxyRequest:
    """An Anthropic Messages request: `messages` and `max_tokens` are required there (the limit
    is what budgets reserve), `system` is a string or content blocks. Its streams always carry
    their usage (in `message_delta`), so nothing is asked for or dropped."""
    messages = payload.get("messages")
    if messages is None:
        raise _invalid("messages: Field required", "messages", "missing_required_parameter")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise _invalid("messages: must be a non-empty array of message objects.", "messages")
    limit = payload.get("max_tokens")
    if limit is None:
        raise _invalid("max_tokens: Field required", "max_tokens", "missing_required_parameter")
    if not _is_int(limit) or limit < 1:
        raise _invalid("max_tokens: must be a positive integer.", "max_tokens")
    system = payload.get("system")
    if system is not None and not isinstance(system, str | list):
        raise _invalid("system: must be a string or an array of content blocks.", "system")
    for name in ("temperature", "top_p"):
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise _invalid(f"{name}: must be a number, not {_json_type(value)}.", name)
    if payload.get("top_k") is not None and not _is_int(payload["top_k"]):
        raise _invalid("top_k: must be an integer.", "top_k")
    return ProxyRequest(payload=payload, model=model, stream=stream, wants_usage=True, endpoint=MESSAGES)


def _responses(payload: dict[str, Any], model: str, stream: bool) -> ProxyRequest:
    """A Responses API request: `input` a string or a list of input items. `background` is
    refused: the engine would go on working after the gateway answered and gave its slot back, out
    of every cap. Its streams carry their usage in `response.completed`: nothing is asked for."""
    data = payload.get("input")
    if data is None:
        raise _invalid("'input' is a required property.", "input", "missing_required_parameter")
    if not (isinstance(data, str) and data) and not (isinstance(data, list) and data):
        raise _invalid("'input' must be a non-empty string or array of input items.", "input")
    if isinstance(data, list) and not all(isinstance(item, dict | str) for item in data):
        raise _invalid("Each entry of 'input' must be an input item (an object).", "input")
    limit = payload.get("max_output_tokens")
    if limit is not None and (not _is_int(limit) or limit < 1):
        raise _invalid("'max_output_tokens' must be a positive integer.", "max_output_tokens")
    for name in ("instructions", "previous_response_id", "user"):
        value = payload.get(name)
        if value is not None and not isinstance(value, str):
            raise _invalid(f"'{name}' must be a string, not {_json_type(value)}.", name)
    for name in ("store", "background"):
        value = payload.get(name)
        if value is not None and not isinstance(value, bool):
            raise _invalid(f"'{name}' must be a boolean.", name)
    if payload.get("background"):
        raise _invalid("'background' responses are not run here: the gateway holds a request's slot until it "
                       "is answered. Leave it out (or stream the response).", "background", "unsupported_value")
    for name in ("temperature", "top_p"):
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise _invalid(f"'{name}' must be a number, not {_json_type(value)}.", name)
    return ProxyRequest(payload=payload, model=model, stream=stream, wants_usage=True, endpoint=RESPONSES)


# The common sampling parameters, checked for their type only (null means the default): a
# mistyped one is refused here, naming it, rather than after the request waited its turn for an
# engine that would refuse it anyway. Their ranges are the engine's to judge.
_NUMBERS = ("temperature", "top_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_p")
_INTEGERS = ("seed", "top_k", "top_logprobs")
_BOOLEANS = ("logprobs", "echo", "ignore_eos")


def _check_sampling_types(payload: dict[str, Any]) -> None:
    for name in _NUMBERS:
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise _invalid(f"'{name}' must be a number, not {_json_type(value)}.", name)
    for name in _INTEGERS:
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _invalid(f"'{name}' must be an integer, not {_json_type(value)}.", name)
    for name in _BOOLEANS:
        value = payload.get(name)
        if value is not None and not isinstance(value, bool) and not (name == "logprobs" and _is_int(value)):
            raise _invalid(f"'{name}' must be a boolean, not {_json_type(value)}.", name)
    stop = payload.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
        isinstance(stop, list) and all(isinstance(item, str) for item in stop)
    ):
        raise _invalid("'stop' must be a string or an array of strings.", "stop")
    logit_bias = payload.get("logit_bias")
    if logit_bias is not None and not isinstance(logit_bias, dict):
        raise _invalid(f"'logit_bias' must be an object, not {_json_type(logit_bias)}.", "logit_bias")
    user = payload.get("user")
    if user is not None and not isinstance(user, str):
        raise _invalid(f"'user' must be a string, not {_json_type(user)}.", "user")


def _is_int(value: object) -> bool:
    # The completions API's `logprobs` is a count, chat's a boolean.
    return isinstance(value, int) and not isinstance(value, bool)


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _prompt_count(prompt: str | list[Any]) -> int:
    """Prompts in a completions request: a string or a list of token ids is one; a list of
    strings or of token-id lists is a batch."""
    if isinstance(prompt, str) or not prompt or isinstance(prompt[0], int):
        return 1
    return len(prompt)


def _json_error(detail: str) -> str:
    if "surrogate" in detail:
        return ("The request body contains a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), "
                "which is not text.")
    if "depth" in detail:
        return "The request body is nested too deeply."
    return "The request body is not valid JSON."


@functools.lru_cache(maxsize=4096)  # one HMAC per user, not per request
def owner_cache_salt(owner_id: int) -> str:
    """vLLM's `cache_salt` for a key's owner: the same for all of one user's keys, different
    between users, and not guessable from the user's id without SECRET_KEY."""
    message = f"gpuportal prefix-cache salt:{owner_id}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


def upstream_body(
    request: ProxyRequest, original: bytes, engine_priority: int | None, cache_salt: str | None = None,
    max_completion: int | None = None,
) -> bytes:
    """The body to forward: the client's own bytes unless the gateway must add something.

    With `cache_salt` (a tier that isolates the prefix cache) the engine reuses cached prefixes
    only between requests of the same user; a client's own salt is overwritten, so nobody can
    claim another user's. With `max_completion` (what the key's budgets reserved) the engine
    runs no further than that, whatever limit the client named or left out.
    """
    payload = request.payload
    changed = False
    if max_completion is not None:
        payload = _with_limit(payload, request.endpoint, max_completion)
        changed = True
    if cache_salt is not None:
        payload = {**payload, "cache_salt": cache_salt}
        changed = True
    if request.stream and not request.wants_usage:
        # Ask for the usage chunk so streams are counted; the relay drops it again.
        payload = {**payload, "stream_options": {**(payload.get("stream_options") or {}), "include_usage": True}}
        changed = True
    if engine_priority is not None:
        payload = {**payload, "priority": engine_priority}
        changed = True
    elif "priority" in payload:
        # A client must not reorder the engine's queue on its own say-so.
        payload = {k: v for k, v in payload.items() if k != "priority"}
        changed = True
    if not changed:
        return original
    try:
        return orjson.dumps(payload)  # fast for a large body, like the parse
    except orjson.JSONEncodeError:  # nested past orjson's 254 levels: the standard library goes on
        pass
    try:
        return json.dumps(payload).encode()
    except RecursionError:
        raise ApiError(400, "The request body is nested too deeply.", "invalid_json") from None


def _with_limit(payload: dict[str, Any], endpoint: str, limit: int) -> dict[str, Any]:
    """The field the engine obeys set to `limit`, and the other one no higher (an engine that
    reads it instead stops in time too)."""
    if endpoint == MESSAGES:
        return {**payload, "max_tokens": limit}  # the only limit there is
    if endpoint == RESPONSES:
        return {**payload, "max_output_tokens": limit}
    obeyed, other = "max_completion_tokens", "max_tokens"
    if endpoint != CHAT:
        obeyed, other = other, obeyed
    payload = {**payload, obeyed: limit}
    if payload.get(other) is not None and payload[other] > limit:
        payload[other] = limit
    return payload
