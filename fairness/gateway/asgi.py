"""The ASGI front of /v1/: the one route table, the key checked before the body is read, the one
body-size check and body timeout, the one request id.

Django's ASGI handler wraps every request in a thread-sensitive context and runs the
request_started / request_finished signals and response.close() through sync_to_async, which
means a fresh worker thread and several thread hops per request. None of that serves the
proxy: it has no middleware, sessions or templates, and its own code is async. So /v1/ gets this
small adapter instead: it checks the key from the headers, reads the body (stopping at the size
limit and the body timeout), calls the view with the process's runtime, sends the response, and
cancels the view when the client disconnects.

The key comes first: a caller without a valid one gets its 401 having cost the gateway its
headers and, for an unknown key, one cached lookup, never its body (which the server then reads
and drops, so the connection stays usable; see http_server.py for what bounds that).

It also answers the ASGI lifespan: the runtime is made at start-up and closed at shutdown.
On SIGTERM the server stops accepting connections and waits for the requests in flight; this
app gives them GP_SHUTDOWN_GRACE_SECONDS and then cancels what is left (each cancelled request
gives its lease back), so shutdown ends whatever the server's own graceful timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.exceptions
from django.conf import settings
from django.http import HttpResponse, HttpResponseBase

from fairness.gateway import (
    anthropic_shape,
    database_outage,
    queue_views,
    responses_views,
    tokenizer_views,
    tracing,
    views,
)
from fairness.gateway.api_keys import KeyInfo
from fairness.gateway.errors import ApiError, ErrorResponse
from fairness.gateway.http_server import ANSWERED_HERE, vouch_for
from fairness.gateway.process_counts import CLIENT_CLOSED, PROCESS_COUNTS
from fairness.gateway.runtime import GatewayRuntime
from fairness.gateway.streamed_body import (
    BodyStream,
    BodyTimedOut,
    StreamedRequest,
    StreamedRoute,
    find_route,
    too_large,
)
from fairness.gateway.views import GatewayRequest
from fairness.scheduling.directory import ReplicaDirectory

log = logging.getLogger(__name__)

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
View = Callable[[GatewayRequest, GatewayRuntime], Awaitable[HttpResponseBase]]
AnyRequest = TypeVar("AnyRequest", GatewayRequest, StreamedRequest)

ROUTES: dict[str, View] = {
    "/v1/chat/completions": views.chat_completions,
    "/v1/completions": views.completions,
    "/v1/embeddings": views.embeddings,
    "/v1/messages": views.messages,
    "/v1/responses": views.responses,
    "/v1/rerank": views.rerank,
    "/v2/rerank": views.rerank,
    "/v1/score": views.score,
    "/tokenize": tokenizer_views.tokenize,
    "/v1/messages/count_tokens": tokenizer_views.count_tokens,
    "/detokenize": tokenizer_views.detokenize,
    "/v1/models": views.models,
    "/v1/queue": queue_views.queue,
}
# Routes whose path goes on with a parameter (a model's id may itself hold a slash: "org/name").
PREFIX_ROUTES: dict[str, View] = {
    "/v1/models/": views.model,
    "/v1/responses/": responses_views.stored_response,
}


# What a front end's key may call, for the person a request names; listing models names nobody
# (Open WebUI lists them at start, with no user).
FRONT_END_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/messages"})


async def _spoken_for(runtime: GatewayRuntime, key: KeyInfo, path: str, headers: dict[str, str]) -> KeyInfo:
    if path == "/v1/models" or path.startswith("/v1/models/"):
        return key
    if path not in FRONT_END_ROUTES:
        raise ApiError(403, "A front end's key serves chats, completions, messages and embeddings for the people "
                       "it names; files and batches need a key of one's own.", "front_end_route")
    return await runtime.people.speak_for(key, headers)


def route(path: str) -> View | None:
    """The view for a /v1/ path, or None."""
    view = ROUTES.get(path.rstrip("/") or "/")
    if view is not None:
        return view
    for prefix, prefixed in PREFIX_ROUTES.items():
        if path.startswith(prefix) and len(path) > len(prefix):
            return prefixed
    return None


# What the shutdown's own steps may take once the requests have ended (runtime.close bounds its
# waits for settles and the usage outbox at 5 and 2 s), and, past the grace period, how long the
# process may take to end at all before it is ended (with the default grace of 30 s, before
# compose's stop_grace_period of 40 s would kill it without a word).
_CLOSE_BOUND_SECONDS = 8.0
_EXIT_MARGIN_SECONDS = 8.0


def _exit_stuck(after: float) -> None:
    """The process did not end `after` s past the signal: say where it is stuck, and end it. Its
    leases were given back at the cut-off, or expire with their TTL."""
    log.error("shutting down: still running %g s after the signal; the stacks follow, then exit", after)
    faulthandler.dump_traceback(all_threads=True)
    os._exit(1)


class GatewayApp:
    """The ASGI application for /v1/ and the lifespan, holding this process's runtime.

    `streamed_routes` adds routes whose view reads the body itself (gateway/streamed_body.py),
    looked up only for a path the fixed routes do not serve."""

    def __init__(self, streamed_routes: dict[str, StreamedRoute] | None = None) -> None:
        self.streamed_routes = streamed_routes or {}
        self.runtime: GatewayRuntime | None = None
        self._requests: set[asyncio.Task[Any]] = set()
        self._grace: asyncio.TimerHandle | None = None
        self._cutting_off = False  # from now on a cancelled request was cut off, not abandoned

    async def lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self.runtime = GatewayRuntime.from_settings()
                    await self.runtime.start()
                    self._watch_for_shutdown()
                except Exception as exc:
                    log.exception("gateway start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.runtime is not None:
                    log.info("shutting down: every request has ended; giving back what this process holds")
                    try:
                        async with asyncio.timeout(_CLOSE_BOUND_SECONDS):
                            await self.runtime.close()
                    except TimeoutError:
                        log.error("shutting down: giving back did not finish within %g s; leaving it to "
                                  "the lease TTL", _CLOSE_BOUND_SECONDS)
                    except Exception:
                        log.exception("gateway shutdown failed")
                log.info("shutting down: done")
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _watch_for_shutdown(self) -> None:
        """Start the grace period when the server is told to stop. The server's own handlers
        stay in place: ours runs first and hands the signal on."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            if not callable(previous):
                continue  # not the server's: leave the default behaviour alone

            def handler(signum: int, frame: Any, previous: Any = previous) -> None:
                loop.call_soon_threadsafe(self._start_grace)
                previous(signum, frame)

            try:
                signal.signal(signum, handler)
            except ValueError:  # not the main thread: no graceful cut-off, the server's applies
                return

    def _start_grace(self) -> None:
        if self._grace is None:
            grace = settings.GP_SHUTDOWN_GRACE_SECONDS
            log.info("shutting down: %d requests in flight get %g s", len(self._requests), grace)
            self._grace = asyncio.get_running_loop().call_later(grace, self._cut_off)
            # The last resort, on a thread of its own so that a stuck event loop cannot stop it.
            watchdog = threading.Timer(grace + _EXIT_MARGIN_SECONDS, _exit_stuck, (grace + _EXIT_MARGIN_SECONDS,))
            watchdog.daemon = True
            watchdog.start()

    def _cut_off(self) -> None:
        self._cutting_off = True
        if self.runtime is not None:
            self.runtime.cutting_off = True  # the request log says "shutdown", not "client_gone"
        for task in list(self._requests):
            task.cancel()

    def _runtime(self) -> GatewayRuntime:
        if self.runtime is None:
            # A server run without the lifespan: the runtime is made on first use and its
            # leases expire with the lease TTL instead of being given back at shutdown.
            log.warning("no ASGI lifespan: run the server with lifespan on to shut down cleanly")
            self.runtime = GatewayRuntime.from_settings()
        return self.runtime

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        request_id = "req-" + os.urandom(16).hex()  # a random UUID's bits, without building one
        view = route(scope["path"])
        if view is None and (streamed := find_route(self.streamed_routes, scope["path"])) is not None:
            return await self._serve_streamed(streamed, scope, receive, send, request_id)
        try:
            if view is None:
                raise ApiError(404, f"Unknown endpoint {scope['path']}.", "unknown_url")
            request = await self._read_request(scope, receive, request_id)
        except BodyTimedOut:
            await _send_response(_said_for(scope["path"], _body_timed_out()), send, request_id)
            return
        except Exception as exc:
            await _send_response(_said_for(scope["path"], _failure(exc, request_id)), send, request_id)
            return
        if request is None:
            _count_gone(scope)
            return  # gone before we could answer
        await self._answer_until_disconnect(view, request, send, _until_disconnect(receive), scope)

    async def _serve_streamed(
        self, streamed: StreamedRoute, scope: dict[str, Any], receive: Receive, send: Send, request_id: str
    ) -> None:
        """A streamed route: the key checked from the headers, then the view reads the body."""
        try:
            headers, key, directory = await self._authenticate(scope)
            declared = headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > streamed.max_body_bytes:
                raise too_large(streamed.max_body_bytes)
        except Exception as exc:
            await _send_response(_failure(exc, request_id), send, request_id)
            return
        body = BodyStream(receive, streamed.max_body_bytes, settings.GP_CLIENT_BODY_TIMEOUT_SECONDS)
        request = StreamedRequest(
            method=scope["method"], path=scope["path"], query_string=scope["query_string"].decode("latin-1"),
            headers=headers, body=body, request_id=request_id, key=key, directory=directory,
        )
        await self._answer_until_disconnect(streamed.view, request, send, body.pump(), scope)

    async def _answer_until_disconnect(
        self,
        view: Callable[[AnyRequest, GatewayRuntime], Awaitable[HttpResponseBase]],
        request: AnyRequest,
        send: Send,
        watch: Awaitable[None],
        scope: dict[str, Any],
    ) -> None:
        """Answer the request, cancelling the view if `watch` sees the client leave first."""
        answering = asyncio.ensure_future(self._answer(view, request, send, scope))
        watching = asyncio.ensure_future(watch)
        self._requests.add(answering)
        answering.add_done_callback(self._requests.discard)
        try:
            await asyncio.wait({answering, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (answering, watching):
                if not task.done():
                    task.cancel()  # a client that left cancels its request; the view cleans up
                with contextlib.suppress(asyncio.CancelledError):
                    try:
                        await task
                    except Exception:
                        log.exception("proxy request %s failed", request.request_id)

    async def _read_request(
        self, scope: dict[str, Any], receive: Receive, request_id: str
    ) -> GatewayRequest | None:
        """The request, its key checked before its body is read; None if the client left."""
        headers, key, directory = await self._authenticate(scope)
        body = await _read_body(receive, headers.get("content-length"))
        if body is None:
            return None
        return GatewayRequest(
            method=scope["method"], path=scope["path"], headers=headers, body=body,
            request_id=request_id, key=key, directory=directory,
        )

    async def _authenticate(self, scope: dict[str, Any]) -> tuple[dict[str, str], KeyInfo, ReplicaDirectory]:
        """The request's headers, and its key checked from them (ApiError 401 if not valid)."""
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in reversed(scope["headers"])  # the first of repeats wins
        }
        runtime = self._runtime()
        directory = await runtime.refresh()  # a changed config epoch clears the key cache first
        checking = runtime.keys.authenticate(_authorization(headers))
        key = await (tracing.key_check(checking) if tracing.ENABLED else checking)
        vouch_for(scope)  # a flood of connections that send nothing no longer closes this one
        if key.front_end is not None:
            key = await _spoken_for(runtime, key, scope["path"], headers)
        return headers, key, directory

    async def _answer(
        self,
        view: Callable[[AnyRequest, GatewayRuntime], Awaitable[HttpResponseBase]],
        request: AnyRequest,
        send: Send,
        scope: dict[str, Any],
    ) -> None:
        tracked = _TrackedSend(send)
        try:
            await _send_response(await self._respond(view, request), tracked, request.request_id)
        except asyncio.CancelledError:
            if not self._cutting_off:
                if not tracked.started:
                    _count_gone(scope)
                raise  # the client left: there is nobody to answer
            # Cut off at the end of the grace period. Left alone, uvicorn would answer a request
            # still queued with a bare text 500 and drop a stream mid-body; instead the client
            # gets an OpenAI-shaped 503 (or, mid-stream, an error event and a clean end) and
            # knows to retry elsewhere. The view has already handed its lease back.
            error = ApiError(
                503, "The gateway is shutting down; try again.", "shutting_down", retry_after=1
            )
            if not tracked.started:
                await _send_response(_said_for(request.path, error.response()), send, request.request_id)
            elif tracked.streaming:
                anthropic = anthropic_shape.speaks_anthropic(request.path)
                event = anthropic_shape.sse_event(error) if anthropic else error.sse_event()
                await send({"type": "http.response.body", "body": event})

    async def _respond(
        self, view: Callable[[AnyRequest, GatewayRuntime], Awaitable[HttpResponseBase]], request: AnyRequest
    ) -> HttpResponseBase:
        """The view's answer; every failure becomes an error in the route's shape."""
        try:
            return _said_for(request.path, await view(request, self._runtime()))
        except Exception as exc:
            return _said_for(request.path, _failure(exc, request.request_id))


class StoreFailureLog:
    """Logs Redis failures once per `every` seconds, with the traceback and a count of the rest:
    during an outage every request fails alike, and a traceback each would bury the log."""

    def __init__(self, every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._logged_at = float("-inf")
        self._since = 0  # failures answered since the last report

    def report(self, exc: BaseException) -> None:
        now = self.clock()
        if now - self._logged_at < self.every:
            self._since += 1
            return
        log.error("Redis unavailable; %d more request(s) answered 503 since the last report", self._since,
                  exc_info=exc)
        self._logged_at, self._since = now, 0


_STORE_FAILURES = StoreFailureLog()


def _count_gone(scope: dict[str, Any]) -> None:
    """The client left before any answer: 499, unless the server answered it itself (a body
    too slow gets 408 there, which it counted, and the app then sees the client gone)."""
    if ANSWERED_HERE not in scope.get("extensions", {}):
        PROCESS_COUNTS.count(499, CLIENT_CLOSED)


def _authorization(headers: dict[str, str]) -> str | None:
    """The Authorization header, or the key Anthropic's clients send in x-api-key instead."""
    authorization = headers.get("authorization")
    if authorization is None and "x-api-key" in headers:
        return "Bearer " + headers["x-api-key"].strip()
    return authorization


def _said_for(path: str, response: HttpResponseBase) -> HttpResponseBase:
    """An error in the shape the route's clients read: Anthropic's on the Messages route."""
    return anthropic_shape.reshaped(response) if anthropic_shape.speaks_anthropic(path) else response


def _failure(exc: Exception, request_id: str) -> HttpResponse:
    """The OpenAI-shaped answer to an exception raised while handling a request (call it from
    the except block: it logs the traceback of what was unexpected)."""
    if isinstance(exc, ApiError):
        return exc.response()
    if isinstance(exc, BodyTimedOut):  # a streamed route's body stopped coming
        return _body_timed_out()
    if isinstance(exc, redis.exceptions.RedisError):
        _STORE_FAILURES.report(exc)
        return ApiError(
            503, "The gateway's state store is unavailable; try again shortly.",
            "store_unavailable", retry_after=5,
        ).response()
    if isinstance(exc, database_outage.DATABASE_ERRORS):  # what needed a row not cached (batch files, say)
        database_outage.OUTAGE_LOG.report(exc, "a gateway request")
        return database_outage.unavailable().response()
    log.exception("unexpected gateway error for %s", request_id)
    return ApiError(502, "The gateway failed to handle this request.", "gateway_error").response()


async def _read_body(receive: Receive, content_length: str | None) -> bytes | None:
    """The whole body, None if the client left first. 413 past the size limit (at once when the
    declared length is past it), BodyTimedOut when it is not whole within the body timeout."""
    limit = settings.GP_MAX_BODY_BYTES
    if content_length is not None and content_length.isdigit() and int(content_length) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    try:
        async with asyncio.timeout(settings.GP_CLIENT_BODY_TIMEOUT_SECONDS):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise too_large(limit)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError:
        raise BodyTimedOut from None


def _body_timed_out() -> HttpResponse:
    timeout = settings.GP_CLIENT_BODY_TIMEOUT_SECONDS
    error = ApiError(408, f"The request body did not arrive within {timeout:g} s.", "request_timeout")
    response = error.response()
    # The rest of the body may never come: the connection cannot carry another request.
    response["Connection"] = "close"
    return response


async def _send_response(response: HttpResponseBase, send: Send, request_id: str) -> None:
    # Every answer passes here once: counted in memory, flushed to Redis off the request path.
    PROCESS_COUNTS.count(response.status_code, response.error_code if isinstance(response, ErrorResponse) else None)
    response["X-Request-Id"] = request_id
    headers = [
        (name.lower().encode("latin-1"), str(value).encode("latin-1"))
        for name, value in response.items()
    ]
    if not response.streaming:
        assert isinstance(response, HttpResponse)
        body = response.content
        headers.append((b"content-length", str(len(body)).encode()))
        start = {"type": "http.response.start", "status": response.status_code, "headers": headers}
        await send(start)
        await send({"type": "http.response.body", "body": body})
        return
    start = {"type": "http.response.start", "status": response.status_code, "headers": headers}
    await send(start)
    try:
        async for chunk in response.streaming_content:  # type: ignore[attr-defined]
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body"})
    finally:
        response.close()  # the relay's cleanup, should iteration not have finished it


class _TrackedSend:
    """The server's send, noting whether the response has started (for the cut-off)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False
        self.streaming = False  # no content-length: more may follow the last chunk sent

    async def __call__(self, message: dict[str, Any]) -> None:
        await self.send(message)  # cancelled, it has written nothing (it waits, then writes)
        if message["type"] == "http.response.start":
            self.started = True
            self.streaming = all(name != b"content-length" for name, _ in message["headers"])


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass

