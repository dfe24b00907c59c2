"""OpenAI's Responses API as vLLM serves it (POST /v1/responses, GET /v1/responses/{id}): the input
read as the chat it becomes, the reply as a response object or its stream of named events.

As in vLLM, a stored response (`store`, on by default here as in vLLM run with
VLLM_ENABLE_RESPONSES_API_STORE=1) lives in this server's memory only: a request naming a
`previous_response_id` this server does not hold gets vLLM's 404. A turn's prompt is the previous
conversation, its answer, then the new input, so a conversation's prompt grows turn by turn.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from .config import SimConfig
from .protocol import ApiError, CompletionRequest, bad_request, request_from, request_object
from .tokens import output_pieces


@dataclass
class StoredResponse:
    body: dict[str, Any]
    conversation: list[dict[str, Any]]  # the messages its prompt was, then its answer


@dataclass
class ResponsesRequest:
    completion: CompletionRequest
    conversation: list[dict[str, Any]]
    data: dict[str, Any]
    store: bool
    id: str = field(default_factory=lambda: "resp_" + os.urandom(16).hex())


def not_found(response_id: str) -> ApiError:
    return ApiError(404, f"Response with id '{response_id}' not found.", "invalid_request_error")


def _input_messages(data: dict[str, Any]) -> list[dict[str, Any]]:
    given = data.get("input")
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    if not isinstance(given, list) or not given:
        raise bad_request("'input' must be a string or a non-empty list of input items")
    messages = []
    for item in given:
        if not isinstance(item, dict):
            raise bad_request("each input item must be an object")
        content = item.get("content")
        if isinstance(content, list):  # input_text / output_text parts: their text
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        messages.append({"role": item.get("role", "user"), "content": content or ""})
    return messages


def parse_responses(body: bytes, config: SimConfig, stored: dict[str, StoredResponse]) -> ResponsesRequest:
    """Validate a Responses body the way vLLM does; raises ApiError."""
    data = request_object(body, config)
    conversation: list[dict[str, Any]] = []
    previous = data.get("previous_response_id")
    if previous is not None:
        if previous not in stored:
            raise not_found(str(previous))
        conversation = list(stored[previous].conversation)
    instructions = data.get("instructions")
    if isinstance(instructions, str) and instructions:
        conversation = [{"role": "system", "content": instructions}, *conversation]
    conversation += _input_messages(data)
    chat = {"messages": conversation, "max_tokens": data.get("max_output_tokens"), "stream": data.get("stream"),
            "priority": data.get("priority"), "cache_salt": data.get("cache_salt"), "user": data.get("user")}
    return ResponsesRequest(request_from(chat, True, config), conversation, data, data.get("store") is not False)


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


class ResponsesWriter:
    """Renders one Responses reply, whole or as events (the calls of protocol.ReplyWriter, so the
    engine's timing drives it alike), and stores it once it is whole."""

    def __init__(self, request: ResponsesRequest, model: str, stored: dict[str, StoredResponse]) -> None:
        self.asked = request
        self.request = request.completion  # what the engine's timing reads (.chat, .stream)
        self.model = model
        self.stored = stored
        self.created = int(time.time())
        self.item_id = "msg_" + os.urandom(16).hex()
        self._sequence = 0
        self._incomplete = False

    def _text(self, tokens: int) -> str:
        return "".join(output_pieces(self.request.seed, 0, tokens))

    def _item(self, text: str, status: str) -> dict[str, Any]:
        return {"id": self.item_id, "type": "message", "role": "assistant", "status": status,
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": None}]}

    def _response(self, status: str, output_tokens: int | None, cached_tokens: int = 0) -> dict[str, Any]:
        data = self.asked.data
        output: list[dict[str, Any]] = []
        usage = None
        if output_tokens is not None:
            output = [self._item(self._text(output_tokens), "completed")]
            prompt = self.request.prompt_tokens
            usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached_tokens},
                     "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                     "total_tokens": prompt + output_tokens}
        return {
            "id": self.asked.id, "object": "response", "created_at": self.created, "model": self.model,
            "status": status, "output": output, "usage": usage,
            "previous_response_id": data.get("previous_response_id"), "instructions": data.get("instructions"),
            "max_output_tokens": data.get("max_output_tokens"), "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [], "temperature": data.get("temperature"), "top_p": data.get("top_p"), "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "metadata": None, "store": self.asked.store,
        }

    def _seq(self, name: str, data: dict[str, Any]) -> str:
        self._sequence += 1
        return _event(name, {"type": name, "sequence_number": self._sequence - 1, **data})

    def _store(self, body: dict[str, Any], tokens: int) -> None:
        if self.asked.store:
            answer = {"role": "assistant", "content": self._text(tokens)}
            self.stored[self.asked.id] = StoredResponse(body, [*self.asked.conversation, answer])

    def role_event(self) -> str:
        where = {"output_index": 0, "item_id": self.item_id, "content_index": 0}
        return (self._seq("response.created", {"response": self._response("in_progress", None)})
                + self._seq("response.in_progress", {"response": self._response("in_progress", None)})
                + self._seq("response.output_item.added", {"output_index": 0, "item": self._item("", "in_progress")})
                + self._seq("response.content_part.added", {
                    **where, "part": {"type": "output_text", "text": "", "annotations": []}}))

    def token_events(self, start: int, stop: int, finish_reason: str | None) -> str:
        if finish_reason == "length":
            self._incomplete = True
        return "".join(
            self._seq("response.output_text.delta",
                      {"output_index": 0, "item_id": self.item_id, "content_index": 0, "delta": piece,
                       "logprobs": []})
            for piece in output_pieces(self.request.seed, start, stop)
        )

    def tail_events(self, completion_tokens: int, cached_tokens: int = 0) -> str:
        text = self._text(completion_tokens)
        where = {"output_index": 0, "item_id": self.item_id, "content_index": 0}
        body = self._response("incomplete" if self._incomplete else "completed", completion_tokens, cached_tokens)
        self._store(body, completion_tokens)
        return (self._seq("response.output_text.done", {**where, "text": text, "logprobs": []})
                + self._seq("response.content_part.done", {
                    **where, "part": {"type": "output_text", "text": text, "annotations": []}})
                + self._seq("response.output_item.done", {"output_index": 0, "item": self._item(text, "completed")})
                + self._seq("response.completed", {"response": body}))

    def full_body(self, model: str, completion_tokens: int, finish_reason: str, cached_tokens: int = 0) -> bytes:
        status = "incomplete" if finish_reason == "length" else "completed"
        body = self._response(status, completion_tokens, cached_tokens)
        self._store(body, completion_tokens)
        return json.dumps(body, separators=(",", ":")).encode()
