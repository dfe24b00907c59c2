"""Relays an engine's server-sent events to the client, counting tokens on the way.

Events are forwarded byte for byte as they arrive. Only an event that mentions "usage" is
parsed: it carries the token counts, and it is dropped when the gateway (not the client)
asked for it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from fairness.gateway.engine_http import EngineAnswer
from fairness.gateway.errors import ApiError

EVENT_END = b"\n\n"
UNSTARTED_GRACE_SECONDS = 10.0
MOST_TOKENS = 2**31 - 1  # what the usage records' columns hold
_STREAM_ENDS = (b"data: [DONE]", b"event: message_stop", b"event: response.completed", b"event: response.incomplete")


@dataclass
class StreamTally:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of the prompt's, found in the engine's prefix cache
    content_events: int = 0
    first_byte_at: float | None = None
    failed: bool = False
    finished: bool = False  # the engine's [DONE] went through
    response_id: str | None = None  # a Responses API answer's id (the engine may have stored it)

    def take_usage(self, usage: Any) -> None:
        """The engine's counts, as far as they are counts: an engine is not trusted to send
        whole numbers, and a negative one would credit budgets and fair share."""
        if not isinstance(usage, dict):
            return
        if "input_tokens" in usage and "prompt_tokens" not in usage:
            self._take_input_output_usage(usage)
            return
        self.prompt_tokens = _token_count(usage.get("prompt_tokens"))
        self.completion_tokens = _token_count(usage.get("completion_tokens"))
        # vLLM sends the details only with --enable-prompt-tokens-details (else null). No
        # more of the prompt can be cached than the prompt: the rest would be charged less.
        details = usage.get("prompt_tokens_details")
        cached = _token_count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        self.cached_tokens = min(cached, self.prompt_tokens)

    def _take_input_output_usage(self, usage: dict[str, Any]) -> None:
        """The Responses API's and Anthropic's names. Anthropic's input_tokens leave out the prompt
        tokens read from or written to the cache, which the engine ran all the same; the Responses
        API's include them, and say the cached ones in input_tokens_details."""
        read = _token_count(usage.get("cache_read_input_tokens"))
        written = _token_count(usage.get("cache_creation_input_tokens"))
        self.prompt_tokens = min(_token_count(usage.get("input_tokens")) + read + written, MOST_TOKENS)
        self.completion_tokens = _token_count(usage.get("output_tokens"))
        details = usage.get("input_tokens_details")
        cached = _token_count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        self.cached_tokens = read or min(cached, self.prompt_tokens)


def _token_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:  # NaN
        return 0
    return int(min(max(value, 0), MOST_TOKENS))


class Relay:
    """An async iterable for StreamingHttpResponse that always runs its cleanup once.

    Django closes a streaming response by calling the iterable's sync close() from a worker
    thread, and may never start iterating at all when the client leaves early; close()
    therefore hands the cleanup back to the event loop instead of relying on the generator.
    """

    def __init__(
        self,
        upstream: EngineAnswer,
        *,
        strip_usage: bool,
        on_done: Callable[[StreamTally], Awaitable[None]],
        replica_name: str,
        error_event: Callable[[ApiError], bytes] = ApiError.sse_event,
        on_response_id: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.upstream = upstream
        self.error_event = error_event  # how this stream's clients read an error (route's shape)
        # Told a Responses answer's id once, as soon as the stream names it: before it completes,
        # so a client's next turn naming it finds where it is stored.
        self.on_response_id = on_response_id
        self.strip_usage = strip_usage
        self.on_done = on_done
        self.replica_name = replica_name
        self.tally = StreamTally()
        self._loop = asyncio.get_running_loop()
        self._finished: asyncio.Future[None] | None = None
        self._started = False
        # If the client leaves between the view returning and the body starting, Django drops
        # the response without closing it; nothing would ever give the lease back.
        self._watchdog = self._loop.call_later(UNSTARTED_GRACE_SECONDS, self._abandon_if_unstarted)

    def _abandon_if_unstarted(self) -> None:
        if not self._started:
            self.finish()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._relay()

    async def _relay(self) -> AsyncIterator[bytes]:
        self._started = True
        self._watchdog.cancel()
        pending = b""
        try:
            async for chunk in self.upstream.aiter_raw():
                if self.tally.first_byte_at is None:
                    self.tally.first_byte_at = time.perf_counter()
                pending += chunk
                cut = pending.rfind(EVENT_END)
                if cut < 0:
                    continue
                complete, pending = pending[: cut + 2], pending[cut + 2 :]
                out = self._inspect(complete)
                if self.on_response_id is not None and self.tally.response_id is not None:
                    noted, self.on_response_id = self.on_response_id, None
                    await noted(self.tally.response_id)
                if out:
                    yield out
            if pending:
                yield pending
        except httpx.HTTPError:
            self.tally.failed = True
            error = ApiError(502, f"The engine ({self.replica_name}) broke off the stream.", "upstream_stream_broken")
            yield self.error_event(error)
        finally:
            await asyncio.shield(self.finish())

    def _inspect(self, events: bytes) -> bytes:
        if b'"usage"' not in events:
            self._count(events)
            return events
        kept = []
        for event in events.split(EVENT_END):
            if not event:
                continue
            if b'"usage"' in event and self._take_usage(event):
                continue
            self._count(event)
            kept.append(event + EVENT_END)
        return b"".join(kept)

    def _take_usage(self, event: bytes) -> bool:
        """Reads the counts from a usage event; True when the event should be dropped."""
        try:
            data = json.loads(event.partition(b"data:")[2])
        except (ValueError, RecursionError):  # an engine's event nested past the parser's depth
            return False
        if not isinstance(data, dict):
            return False
        usage = data.get("usage")
        response = data.get("response")
        if isinstance(response, dict):  # a Responses API event: the response so far, its usage at the end
            if isinstance(response.get("id"), str):
                self.tally.response_id = response["id"]
            usage = response.get("usage")
        if not isinstance(usage, dict):
            return False
        self.tally.take_usage(usage)
        return self.strip_usage and not data.get("choices")

    def _count(self, events: bytes) -> None:
        self.tally.content_events += events.count(b"data:") - events.count(b"data: [DONE]")
        # Chat streams end with [DONE], Anthropic's with message_stop, the Responses API's with
        # response.completed (or .incomplete, cut at its limit).
        if any(end in events for end in _STREAM_ENDS):
            self.tally.finished = True

    def finish(self) -> asyncio.Future[None]:
        """Close upstream and report, once, whichever path gets here first."""
        self._watchdog.cancel()
        if self._finished is None:
            self._finished = asyncio.ensure_future(self._finish())
        return self._finished

    async def _finish(self) -> None:
        try:
            await self.upstream.aclose()  # tells the engine to abort if it is still generating
        finally:
            await self.on_done(self.tally)

    def close(self) -> None:
        # Called by Django from a worker thread after the response, or after a disconnect.
        self._loop.call_soon_threadsafe(self.finish)
