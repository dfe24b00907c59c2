"""Errors on the Messages route in Anthropic's shape: {"type": "error", "error": {"type",
"message"}}, which its SDK reads (it raises the matching class, and retries 429 and 5xx). The
gateway makes every error in OpenAI's shape; on this route it is said again in Anthropic's, whole
bodies and the error event of a stream alike.
"""

from __future__ import annotations

import json

from django.http import HttpResponseBase

from fairness.gateway.errors import ApiError

MESSAGE_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})

# Anthropic's error types by status (its API reference, "Errors").
_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 402: "billing_error", 403: "permission_error",
    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
    504: "timeout_error", 529: "overloaded_error",
}


def speaks_anthropic(path: str) -> bool:
    return path.rstrip("/") in MESSAGE_PATHS


def _body(status: int, message: str) -> dict[str, object]:
    kind = _TYPES.get(status, "invalid_request_error" if 400 <= status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def reshaped(response: HttpResponseBase) -> HttpResponseBase:
    """An OpenAI-shaped error response said in Anthropic's shape (status and headers kept);
    anything else as it is."""
    if response.streaming or response.status_code < 400:
        return response
    try:
        detail = json.loads(response.content)["error"]  # type: ignore[attr-defined]
        message = detail["message"]
    except (ValueError, KeyError, TypeError):
        return response
    response.content = json.dumps(_body(response.status_code, str(message)))  # type: ignore[attr-defined]
    return response


def sse_event(error: ApiError) -> bytes:
    """The error event that ends a stream under way (Anthropic's streams have no [DONE])."""
    return b"event: error\ndata: " + json.dumps(_body(error.status, error.message)).encode() + b"\n\n"
