"""One client call of a chaos run, through the official openai SDK or raw HTTP, and what came of it.

Every call has a deadline (a call still running then has hung) and may be abandoned: after some
seconds whether or not anything came back ("queued"), or after some chunks of its stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass

import httpx
import openai

from tests.chaos.world import MODEL


@dataclass
class Outcome:
    index: int
    kind: str  # "load", "long", "burst", "probe" or "fill"
    key: str
    gateway: int
    sdk: bool
    stream: bool
    sent_at: float
    headers_at: float | None = None
    ended_at: float | None = None
    status: int | None = None  # None: no response (refused, reset, hung)
    code: str = ""  # the OpenAI-shaped error's code, or the stream's error event's
    replica: str = ""
    request_id: str = ""
    chunks: int = 0
    completed: bool = False  # a whole answer: a body with usage, or a stream to [DONE]
    abandoned: str = ""  # "queued" (nothing back yet), "stream" (headers came) or ""
    error: str = ""  # the exception that ended the call, if any
    error_detail: str = ""  # its message, and its cause's ("Server disconnected ...")
    hung: bool = False


@dataclass(frozen=True)
class Call:
    url: str  # the gateway's
    secret: str
    key: str
    prompt: str
    max_tokens: int
    stream: bool
    sdk: bool
    abandon: str | None = None
    abandon_after: float = 0.0


def _body(call: Call) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": call.prompt}],
            "max_tokens": call.max_tokens, "stream": call.stream, "user": call.key, "ignore_eos": True}


def _error_code(text: str) -> str:
    try:
        detail = json.loads(text).get("error") or {}
    except (ValueError, AttributeError):
        return ""
    return str(detail.get("code") or "") if isinstance(detail, dict) else ""


async def _raw(client: httpx.AsyncClient, call: Call, out: Outcome) -> None:
    headers = {"authorization": f"Bearer {call.secret}"}
    async with client.stream("POST", call.url + "/v1/chat/completions", json=_body(call), headers=headers) as answer:
        _took_headers(out, answer.status_code, answer.headers)
        if answer.status_code != 200:
            out.code = _error_code((await answer.aread()).decode(errors="replace"))
            return
        if not call.stream:
            data = json.loads(await answer.aread())
            out.completed = bool(data.get("usage")) and bool(data.get("choices"))
            return
        async for line in answer.aiter_lines():
            payload = line.removeprefix("data: ")
            if payload == "[DONE]":
                out.completed = not out.code
            elif payload.startswith('{"error"'):
                out.code = _error_code(payload) or "stream_error"
            elif payload.startswith("{"):
                out.chunks += 1
                if call.abandon == "stream" and out.chunks >= call.abandon_after:
                    out.abandoned = "stream"
                    return


async def _sdk(client: openai.AsyncOpenAI, call: Call, out: Outcome) -> None:
    create = client.chat.completions.with_raw_response.create
    try:
        raw = await create(model=MODEL, messages=[{"role": "user", "content": call.prompt}],
                           max_tokens=call.max_tokens, stream=call.stream, user=call.key,
                           extra_body={"ignore_eos": True})
    except openai.APIStatusError as exc:
        _took_headers(out, exc.status_code, exc.response.headers)
        out.code = _error_code(exc.response.text)
        return
    _took_headers(out, raw.status_code, raw.headers)
    if not call.stream:
        completion = raw.parse()
        out.completed = completion.usage is not None and bool(completion.choices)
        return
    stream = raw.parse()
    try:
        async for _chunk in stream:
            out.chunks += 1
            if call.abandon == "stream" and out.chunks >= call.abandon_after:
                out.abandoned = "stream"
                return
        out.completed = True  # the SDK raises on an error event and stops at [DONE]
    except openai.APIError as exc:
        out.code = str(getattr(exc, "code", "") or type(exc).__name__)
    finally:
        await stream.close()


def _took_headers(out: Outcome, status: int, headers: httpx.Headers) -> None:
    out.headers_at = time.monotonic()
    out.status = status
    out.replica = headers.get("x-gpuportal-replica", "")
    out.request_id = headers.get("x-request-id", "")


class Clients:
    """One pooled HTTP client for every call, and the SDK on top of it."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=5.0), limits=limits)
        self._sdks: dict[tuple[str, str], openai.AsyncOpenAI] = {}

    def sdk(self, url: str, secret: str) -> openai.AsyncOpenAI:
        found = self._sdks.get((url, secret))
        if found is None:
            found = openai.AsyncOpenAI(base_url=url + "/v1", api_key=secret, max_retries=0,
                                       timeout=self.timeout, http_client=self.http)
            self._sdks[(url, secret)] = found
        return found

    async def run(self, call: Call, out: Outcome) -> Outcome:
        """Make the call; returns when it ended, was abandoned, failed, or hung."""
        attempt = self._sdk_attempt(call, out) if call.sdk else _raw(self.http, call, out)
        task = asyncio.ensure_future(attempt)
        try:
            if call.abandon == "queued":
                done, _ = await asyncio.wait({task}, timeout=call.abandon_after)
                if not done:
                    out.abandoned = "queued" if out.headers_at is None else "stream"
                    task.cancel()
            done, _ = await asyncio.wait({task}, timeout=self.timeout)
            if not done:
                out.hung = True
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        except asyncio.CancelledError:
            task.cancel()
            raise
        except (httpx.HTTPError, openai.APIError, ValueError) as exc:
            out.error = type(exc).__name__
            out.error_detail = "; ".join(str(e)[:120] for e in (exc, exc.__cause__) if e is not None)
        out.ended_at = time.monotonic()
        return out

    async def _sdk_attempt(self, call: Call, out: Outcome) -> None:
        await _sdk(self.sdk(call.url, call.secret), call, out)

    async def aclose(self) -> None:
        await self.http.aclose()
