"""OpenAI / vLLM request parsing and response shapes (bodies, SSE chunks, errors).

Chunks are assembled from pre-rendered string pieces rather than ``json.dumps`` per token: the
token texts are ASCII words (see tokens.py), so they need no escaping, and this keeps the
per-token cost of streaming tiny.
"""

from __future__ import annotations

import array
import itertools
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from .config import SimConfig
from .tokens import (
    count_tokens,
    encode_ids,
    encode_text,
    natural_length,
    output_pieces,
    prompt_seed,
    render_chat,
)

DONE_EVENT = "data: [DONE]\n\n"
_ID_PREFIX = os.urandom(4).hex()
_ids = itertools.count(1)


class ApiError(Exception):
    """An error answered to the client in OpenAI's shape."""

    def __init__(self, status: int, message: str, type_: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_

    def body(self) -> bytes:
        return error_body(self.status, self.message, self.type)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def error_body(status: int, message: str, type_: str) -> bytes:
    return dumps({"error": {"message": message, "type": type_, "param": None, "code": status}})


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequestError")


@dataclass(slots=True)
class CompletionRequest:
    chat: bool
    units: bytes  # the prompt as token units (tokens.py)
    prompt_tokens: int
    max_tokens: int
    target_tokens: int  # tokens actually produced unless the client leaves first
    stream: bool
    include_usage: bool
    priority: int
    seed: int
    user: str = ""  # the OpenAI `user` field: tests tell callers apart by it in /sim/requests
    cache_salt: str = ""  # vLLM's: cached prefixes are shared only between equal salts


def _int_field(data: dict[str, Any], name: str, default: int | None) -> int | None:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{name}' must be an integer")
    return value


def _bool_field(data: dict[str, Any], name: str) -> bool:
    value = data.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"'{name}' must be a boolean")
    return value


def _prompt_units(data: dict[str, Any], chat: bool) -> bytes:
    if chat:
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty list")
        if not all(isinstance(m, dict) for m in messages):
            raise bad_request("each message must be an object")
        try:
            return encode_text(render_chat(messages))
        except ValueError as exc:
            raise bad_request(str(exc)) from None
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return encode_text(prompt)
    if isinstance(prompt, list) and prompt and all(
        isinstance(i, int) and not isinstance(i, bool) for i in prompt
    ):
        return encode_ids(prompt)
    raise bad_request("'prompt' must be a string or a list of token ids (one prompt per request)")


def request_object(body: bytes, config: SimConfig) -> dict[str, Any]:
    """The body as a JSON object naming this engine's model (or none); raises ApiError."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise bad_request(f"Invalid JSON body: {exc}") from None
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object")
    model = data.get("model", config.model)
    if model != config.model:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    return data


def parse_request(body: bytes, chat: bool, config: SimConfig) -> CompletionRequest:
    """Validate a completions body the way vLLM does; raises ApiError."""
    return request_from(request_object(body, config), chat, config)


def request_from(data: dict[str, Any], chat: bool, config: SimConfig) -> CompletionRequest:
    """A completions request from its parsed body (see parse_request); raises ApiError."""
    units = _prompt_units(data, chat)
    prompt_tokens = count_tokens(units)
    limit = config.max_model_len

    requested = _int_field(data, "max_completion_tokens", None) if chat else None
    if requested is None:
        requested = _int_field(data, "max_tokens", None)
    if requested is not None and requested < 1:
        raise bad_request(f"max_tokens must be at least 1, got {requested}.")
    if requested is None:
        max_tokens = min(config.default_max_tokens, limit - prompt_tokens)
        if max_tokens < 1:
            raise bad_request(
                f"This model's maximum context length is {limit} tokens. However, your request "
                f"has {prompt_tokens} input tokens. Please reduce the length of the input messages."
            )
    else:
        max_tokens = requested
        if prompt_tokens + max_tokens > limit:
            raise bad_request(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages or "
                "completion."
            )

    if (_int_field(data, "n", 1) or 1) != 1:
        raise bad_request("Only n=1 is supported by this engine.")
    stream = _bool_field(data, "stream")
    options = data.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise bad_request("Stream options can only be defined when `stream=True`.")
        if not isinstance(options, dict):
            raise bad_request("'stream_options' must be an object")
        include_usage = bool(options.get("include_usage", False))
    priority = _int_field(data, "priority", 0) or 0
    min_tokens = _int_field(data, "min_tokens", 0) or 0
    seed = prompt_seed(units)
    target = max_tokens if _bool_field(data, "ignore_eos") else natural_length(seed, max_tokens, min_tokens)
    user = data.get("user")
    salt = data.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise bad_request("Parameter 'cache_salt' must be a non-empty string if provided.")
    return CompletionRequest(chat, units, prompt_tokens, max_tokens, target, stream,
                             include_usage, priority, seed, user if isinstance(user, str) else "",
                             cache_salt=salt or "")


def tokenize(body: bytes, config: SimConfig) -> bytes:
    """vLLM's POST /tokenize: a completions prompt or a chat's messages (rendered with the
    generation prompt) counted as a generation would count them, without generating."""
    data = request_object(body, config)
    units = _prompt_units(data, chat="messages" in data)
    count = count_tokens(units)
    # Token ids are the prompt's 4-byte units read as integers: stable for equal prompts.
    ids = list(array.array("I", units))[:count] or [0]
    return dumps({"count": count, "max_model_len": config.max_model_len, "tokens": ids, "token_strs": None})


def detokenize(body: bytes, config: SimConfig) -> bytes:
    """vLLM's POST /detokenize: token ids back to text (tokenize's ids are the prompt's 4-byte
    units, so a tokenized text comes back as it went in)."""
    data = request_object(body, config)
    ids = data.get("tokens")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise bad_request("'tokens' must be a list of integers")
    text = encode_ids(ids).rstrip(b"\0").decode("utf-8", "replace")
    return dumps({"prompt": text})


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
    """vLLM's usage object; `cached_tokens` None when it runs without --enable-prompt-tokens-details
    (its details are then null, in whole answers and streams alike)."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None if cached_tokens is None else {"cached_tokens": cached_tokens},
        "completion_tokens_details": None,  # as vLLM 0.32 sends it
    }


class ReplyWriter:
    """Renders one request's reply: a whole JSON body, or its SSE events piece by piece."""

    def __init__(self, request: CompletionRequest, model_json: str, prompt_tokens_details: bool = False) -> None:
        self.request = request
        self.prompt_tokens_details = prompt_tokens_details
        chat = request.chat
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{_ID_PREFIX}{next(_ids):x}"
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"
        head = (
            f'{{"id":"{self.id}","object":"{"chat.completion.chunk" if chat else self.object}",'
            f'"created":{self.created},"model":{model_json},"choices":'
        )
        self._head = head
        if chat:
            self._open = head + '[{"index":0,"delta":{"content":"'
            self._close = '"},"logprobs":null,"finish_reason":'
        else:
            self._open = head + '[{"index":0,"text":"'
            self._close = '","logprobs":null,"finish_reason":'

    def role_event(self) -> str:
        return (
            f'data: {self._head}[{{"index":0,"delta":{{"role":"assistant","content":""}},'
            '"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def token_events(self, start: int, stop: int, finish_reason: str | None) -> str:
        """SSE events for output tokens start..stop-1; the last carries the finish reason."""
        pieces = output_pieces(self.request.seed, start, stop)
        if not pieces:
            return ""
        open_, mid = "data: " + self._open, self._close + 'null,"stop_reason":null}]}\n\n'
        events = [open_ + piece + mid for piece in pieces[:-1]]
        end = f'"{finish_reason}"' if finish_reason else "null"
        events.append(f'{open_}{pieces[-1]}{self._close}{end},"stop_reason":null}}]}}\n\n')
        return "".join(events)

    def _usage(self, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
        cached = cached_tokens if self.prompt_tokens_details else None
        return usage(self.request.prompt_tokens, completion_tokens, cached)

    def usage_event(self, completion_tokens: int, cached_tokens: int = 0) -> str:
        body = dumps(self._usage(completion_tokens, cached_tokens)).decode()
        return f'data: {self._head}[],"usage":{body}}}\n\n'

    def tail_events(self, completion_tokens: int, cached_tokens: int = 0) -> str:
        if self.request.include_usage:
            return self.usage_event(completion_tokens, cached_tokens) + DONE_EVENT
        return DONE_EVENT

    def full_body(self, model: str, completion_tokens: int, finish_reason: str, cached_tokens: int = 0) -> bytes:
        text = "".join(output_pieces(self.request.seed, 0, completion_tokens))
        choice: dict[str, Any]
        if self.request.chat:
            choice = {
                "index": 0,
                # vLLM 0.32's message: its unset fields null, and no tool_calls when there are none.
                "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                            "audio": None, "function_call": None, "reasoning": None},
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None,
                      "finish_reason": finish_reason, "stop_reason": None}
        return dumps({
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": model,
            "choices": [choice],
            "usage": self._usage(completion_tokens, cached_tokens),
        })
