"""A streamed request that has to wait starts its stream and says where it stands until its answer does.

Past GP_QUEUE_EVENTS_AFTER_MS in the queue, the response starts (200, text/event-stream) and every
second carries an SSE comment, ``: queued position=3 eta_ms=2100``: the requests of those waiting
now that admission will grant first, and the wait estimate (scheduling/wait_estimate.py; left out
beyond its horizon). A comment is a line that starts with a colon, which every SSE client skips
(the official SDKs among them), so clients that know nothing of it keep working. The last one,
``: queued position=0 eta_ms=0``, comes when its slot does, just before the answer's first
event. A request granted sooner sends no extra byte.

Once the stream has started, its status is spent: a refusal after that (it timed out in the
queue, its replica failed it) ends the stream with an error event in the route's shape instead
of a 429 or 502, and the gateway's own headers (replica, time queued) are not sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

from django.http import HttpResponseBase, StreamingHttpResponse
from redis.exceptions import RedisError

from fairness.gateway.errors import ApiError
from fairness.store.cancelling import cancel_and_wait

log = logging.getLogger(__name__)

Place = tuple[int, float | None]  # (requests ahead, seconds still to wait or None)


def comment(place: Place) -> bytes:
    position, eta = place
    said = f": queued position={position}"
    if eta is not None:
        said += f" eta_ms={round(eta * 1000)}"
    return said.encode() + b"\n\n"


async def answer_or_wait(
    answering: Coroutine[Any, Any, HttpResponseBase], *, after: float,
    where: Callable[[], Awaitable[Place | None]], error_event: Callable[[ApiError], bytes],
    interval: float = 1.0,
) -> HttpResponseBase:
    """The answer, if it comes (or is refused) within `after` seconds; else a stream that
    tells the request's place (`where`) every `interval` until the answer streams on in it."""
    task = asyncio.get_running_loop().create_task(answering)
    try:
        done, _ = await asyncio.wait({task}, timeout=after)
    except asyncio.CancelledError:  # the client left
        await cancel_and_wait(task)
        raise
    if done:
        return task.result()
    stream = StreamingHttpResponse(QueuedStream(task, where, error_event, interval), content_type="text/event-stream")
    stream["Cache-Control"] = "no-cache"
    stream["X-Accel-Buffering"] = "no"
    return stream


class QueuedStream:
    """The body of a stream that started while its request waited (an async iterable for
    StreamingHttpResponse). Closing it (the client left) withdraws the request."""

    def __init__(
        self, task: asyncio.Task[HttpResponseBase], where: Callable[[], Awaitable[Place | None]],
        error_event: Callable[[ApiError], bytes], interval: float,
    ) -> None:
        self._task = task
        self._where = where
        self._error_event = error_event
        self._interval = interval
        self._answer: HttpResponseBase | None = None
        self._loop = asyncio.get_running_loop()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._body()

    async def _body(self) -> AsyncIterator[bytes]:
        try:
            while not self._task.done():
                place = await self._place()
                if place is not None:
                    yield comment(place)
                await asyncio.wait({self._task}, timeout=self._interval)
            try:
                answer = self._task.result()
            except ApiError as exc:
                yield self._error_event(exc)
                return
            except Exception:  # the view's own handling has closed the request (502)
                log.exception("a queued stream's request failed")
                yield self._error_event(ApiError(502, "The gateway could not complete this request.", "upstream_error"))
                return
            self._answer = answer
            if answer.streaming:
                yield comment((0, 0.0))  # its turn came: the last word on its place, whenever it came
                async for chunk in answer.streaming_content:  # type: ignore[attr-defined]
                    yield chunk
            else:  # the engine refused it: its error, as the stream's last event
                yield self._error_event(_error_of(answer))
        finally:
            await asyncio.shield(self._settle())

    async def _place(self) -> Place | None:
        try:
            return await self._where()
        except (RedisError, OSError):  # no estimate this second; the request waits on regardless
            return None
        except Exception:  # nor when the estimate itself failed: it only informs
            log.exception("a queued stream's place could not be told")
            return None

    async def _settle(self) -> None:
        if not self._task.done():
            await cancel_and_wait(self._task)
        if self._answer is not None:
            self._answer.close()

    def close(self) -> None:
        # Django's close, perhaps from a worker thread; the body may never have started.
        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._settle()))


def _error_of(response: HttpResponseBase) -> ApiError:
    """An error response (OpenAI's shape) as the ApiError it was made from."""
    try:
        said = json.loads(response.content)["error"]  # type: ignore[attr-defined]
        return ApiError(response.status_code, str(said["message"]), said.get("code"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ApiError(response.status_code, f"The request failed ({response.status_code}).", "upstream_error")
