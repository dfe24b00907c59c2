"""Anthropic's Messages API as vLLM serves it (POST /v1/messages): the request read as the chat it
becomes, and the reply as a message object or its stream of named events.

vLLM turns a Messages request into a chat completion and its answer back, so the engine's work is
a chat's: the same prompt units, the same tokens out. Its errors are Anthropic's shape with vLLM's
exception names as the type; its streams end with message_stop (no [DONE]); the usage is in
message_start (the prompt) and message_delta (the whole count).
"""

from __future__ import annotations

import json
from typing import Any

from .config import SimConfig
from .protocol import _ID_PREFIX, ApiError, CompletionRequest, _ids, bad_request, dumps, request_from, request_object
from .tokens import output_pieces

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def error_body(error: ApiError) -> bytes:
    return dumps({"type": "error", "error": {"type": error.type, "message": error.message}})


def parse_messages(body: bytes, config: SimConfig) -> CompletionRequest:
    """Validate a Messages body the way vLLM does (max_tokens is required); raises ApiError."""
    data = request_object(body, config)
    if "max_tokens" not in data:
        raise bad_request("1 validation error:\n  {'type': 'missing', 'loc': ('body', 'max_tokens'), "
                          "'msg': 'Field required'}")
    return _as_chat(data, config)


def count_tokens_body(body: bytes, config: SimConfig) -> bytes:
    """POST /v1/messages/count_tokens: the prompt a Messages request would have, counted."""
    data = request_object(body, config)
    return dumps({"input_tokens": _as_chat({**data, "max_tokens": 1}, config).prompt_tokens})


def _as_chat(data: dict[str, Any], config: SimConfig) -> CompletionRequest:
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list")
    system = data.get("system")
    if system:
        messages = [{"role": "system", "content": system}, *messages]
    metadata = data.get("metadata")
    chat = {
        "messages": messages, "max_tokens": data["max_tokens"], "stream": data.get("stream"),
        "priority": data.get("priority"), "cache_salt": data.get("cache_salt"),
        "user": metadata.get("user_id") if isinstance(metadata, dict) else None,
    }
    return request_from(chat, True, config)


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


class MessagesWriter:
    """Renders one Messages reply: the whole message, or its events piece by piece (the same
    calls as protocol.ReplyWriter, so the engine's timing drives both alike)."""

    def __init__(self, request: CompletionRequest, model: str, prompt_tokens_details: bool = False) -> None:
        self.request = request
        self.model = model
        self.prompt_tokens_details = prompt_tokens_details
        self.id = f"msg_{_ID_PREFIX}{next(_ids):x}"
        self._stop_reason = "end_turn"

    def _usage(self, output_tokens: int, cached_tokens: int = 0) -> dict[str, int]:
        cached = cached_tokens if self.prompt_tokens_details else 0
        found = {"input_tokens": self.request.prompt_tokens - cached, "output_tokens": output_tokens}
        if cached:
            found["cache_read_input_tokens"] = cached
        return found

    def role_event(self) -> str:
        message: dict[str, Any] = {
            "id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
            "stop_reason": None, "stop_sequence": None, "usage": self._usage(0),
        }
        return (_event("message_start", {"type": "message_start", "message": message})
                + _event("content_block_start", {"type": "content_block_start", "index": 0,
                                                 "content_block": {"type": "text", "text": ""}}))

    def token_events(self, start: int, stop: int, finish_reason: str | None) -> str:
        if finish_reason:
            self._stop_reason = _STOP_REASONS.get(finish_reason, "end_turn")
        return "".join(
            _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": piece}})
            for piece in output_pieces(self.request.seed, start, stop)
        )

    def tail_events(self, completion_tokens: int, cached_tokens: int = 0) -> str:
        return (_event("content_block_stop", {"type": "content_block_stop", "index": 0})
                + _event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": self._stop_reason, "stop_sequence": None},
                                           "usage": self._usage(completion_tokens, cached_tokens)})
                + _event("message_stop", {"type": "message_stop"}))

    def full_body(self, model: str, completion_tokens: int, finish_reason: str, cached_tokens: int = 0) -> bytes:
        text = "".join(output_pieces(self.request.seed, 0, completion_tokens))
        return dumps({
            "id": self.id, "type": "message", "role": "assistant", "content": [{"type": "text", "text": text}],
            "model": model, "stop_reason": _STOP_REASONS.get(finish_reason, "end_turn"),
            "usage": self._usage(completion_tokens, cached_tokens),
        })
