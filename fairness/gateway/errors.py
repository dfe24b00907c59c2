"""Errors in the OpenAI shape: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import json

from django.http import HttpResponse

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    431: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


BEARER_CHALLENGE = 'Bearer realm="gpuportal"'


class ErrorResponse(HttpResponse):
    """An ApiError's response, knowing its code: the ASGI front counts answers by it."""

    error_code: str | None = None


class ApiError(Exception):
    """Raised anywhere on the request path; the view turns it into a response."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None,
        *,
        param: str | None = None,
        retry_after: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers or {}  # its own, beside Retry-After
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.retry_after = retry_after

    def body(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": TYPES.get(self.status, "api_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self, headers: dict[str, str] | None = None) -> HttpResponse:
        response = ErrorResponse(
            json.dumps(self.body()), status=self.status, content_type="application/json"
        )
        response.error_code = self.code
        if self.retry_after is not None:
            response["Retry-After"] = str(max(1, round(self.retry_after)))
        for name, value in {**self.headers, **(headers or {})}.items():
            response[name] = value
        if self.status == 401:  # RFC 9110: a 401 names the scheme that would be accepted
            response.setdefault("WWW-Authenticate", BEARER_CHALLENGE)
        return response

    def sse_event(self) -> bytes:
        """The error as a final server-sent event, for streams already under way."""
        return b"data: " + json.dumps(self.body()).encode() + b"\n\ndata: [DONE]\n\n"
