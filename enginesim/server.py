"""The raw ASGI application: vLLM's OpenAI-compatible endpoints plus a few /sim/* controls.

No web framework: routing is a dict lookup and bodies are pre-rendered bytes, so ``--instant``
mode costs the gateway under test as little as possible.

Client disconnects: once the body is read, a timed request keeps one ``receive()`` pending; it
returns ``http.disconnect`` when the client goes away, and its callback aborts the sequence in
the engine, which frees its slot and KV blocks at once (what vLLM does).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from . import __version__
from .config import SimConfig
from .embeddings import embedding_body, parse_embedding
from .engine import Engine, Sequence, State
from .instant import InstantEngine
from .messages import MessagesWriter, count_tokens_body, parse_messages
from .messages import error_body as messages_error_body
from .metrics import build_registry, render
from .protocol import (
    ApiError,
    CompletionRequest,
    ReplyWriter,
    detokenize,
    dumps,
    error_body,
    parse_request,
    tokenize,
)
from .responses import ResponsesWriter, StoredResponse, not_found, parse_responses
from .scoring import parse_rerank, parse_score, rerank_body, score_body
from .tokens import block_hashes

Writer = ReplyWriter | MessagesWriter | ResponsesWriter

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Handler = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON = [(b"content-type", b"application/json")]
SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


class ClientGone(Exception):
    pass


async def read_body(receive: Receive) -> bytes:
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    parts = [body]
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] = JSON
                  ) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def respond_error(send: Send, error: ApiError) -> None:
    await respond(send, error.status, error.body())


class EngineSimApp:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.faults = config.faults
        self.engine: Engine | InstantEngine = (
            InstantEngine(config) if config.instant else Engine(config)
        )
        self.registry = build_registry(self.engine, config.model)
        self.model_json = json.dumps(config.model)
        self.started = int(time.time())
        self._bearer = f"Bearer {config.api_key}".encode() if config.api_key else None
        # Who was in the engine when: the ground truth for tests of the gateway's caps.
        self.request_log: collections.deque[dict[str, Any]] = collections.deque(maxlen=100_000)
        # The W3C traceparent of each request that sent one, as vLLM's own spans would take it as
        # their parent (--otlp-traces-endpoint): tests check the gateway passes its trace on.
        self.traceparents: collections.deque[str] = collections.deque(maxlen=1_000)
        self.stored_responses: dict[str, StoredResponse] = {}  # in memory only, as vLLM's
        # As vLLM: a pooling model's server has no generation routes, a generating one no pooling ones.
        served: dict[tuple[str, str], Handler] = (
            {("POST", "/v1/embeddings"): self._embeddings, ("POST", "/v1/score"): self._score,
             ("POST", "/v1/rerank"): self._rerank, ("POST", "/v2/rerank"): self._rerank}
            if config.runner == "pooling" else
            {("POST", "/v1/chat/completions"): self._chat, ("POST", "/v1/completions"): self._completions,
             ("POST", "/v1/messages"): self._messages, ("POST", "/v1/responses"): self._responses,
             ("POST", "/v1/messages/count_tokens"): self._count_tokens}
        )
        self._routes: dict[tuple[str, str], Handler] = {
            **served,
            ("GET", "/v1/models"): self._models,
            ("POST", "/tokenize"): self._tokenize,
            ("POST", "/detokenize"): self._detokenize,
            ("GET", "/health"): self._health,
            ("GET", "/version"): self._version,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/sim/stats"): self._stats,
            ("POST", "/sim/reset-peak"): self._reset_peak,
            ("GET", "/sim/requests"): self._requests,
            ("GET", "/sim/traceparents"): self._traceparents,
            ("GET", "/sim/faults"): self._get_faults,
            ("POST", "/sim/faults"): self._set_faults,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if isinstance(self.engine, Engine):
                    self.engine.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if isinstance(self.engine, Engine):
                    await self.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        for name, value in scope["headers"]:
            if name == b"traceparent":
                self.traceparents.append(value.decode("latin-1"))
        handler = self._routes.get((scope["method"], path))
        if handler is None and scope["method"] == "GET" and path.startswith("/v1/responses/") and (
                self.config.runner != "pooling"):
            handler = self._stored_response
        if handler is None:
            known = any(route_path == path for _, route_path in self._routes)
            status, kind = (405, "MethodNotAllowed") if known else (404, "NotFoundError")
            await respond(send, status, error_body(status, f"{scope['method']} {path}", kind))
            return
        if self._bearer is not None and path.startswith("/v1/") and not self._authorized(scope):
            await respond(send, 401, error_body(401, "Unauthorized", "AuthenticationError"))
            return
        with contextlib.suppress(ClientGone):
            await handler(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                return bool(value == self._bearer)
        return False

    # -- small endpoints

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        healthy = self.engine.alive and not self.faults.health_fail
        await respond(send, 200 if healthy else 503, b"", [])

    async def _version(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, dumps({"version": __version__}))

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        model = self.config.model
        card = {
            "id": model, "object": "model", "created": self.started, "owned_by": "vllm",
            "root": model, "parent": None, "max_model_len": self.config.max_model_len,
        }
        await respond(send, 200, dumps({"object": "list", "data": [card]}))

    async def _tokenize(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await respond(send, 200, tokenize(await read_body(receive), self.config))
        except ApiError as error:
            await respond_error(send, error)

    async def _detokenize(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await respond(send, 200, detokenize(await read_body(receive), self.config))
        except ApiError as error:
            await respond_error(send, error)

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, render(self.registry),
                      [(b"content-type", CONTENT_TYPE_LATEST.encode())])

    def stats(self) -> dict[str, Any]:
        engine = self.engine
        s = engine.stats
        return {
            # The server's monotonic clock, read with the counters: rates computed from two
            # snapshots are then free of the polling client's own scheduling delays.
            "clock": time.monotonic(),
            "model": self.config.model,
            "instant": self.config.instant,
            "max_num_seqs": self.config.max_num_seqs,
            "running": engine.num_running,
            "waiting": engine.num_waiting,
            "peak_running": s.peak_running,
            "total_requests": s.requests_total,
            "finished": dict(s.finished),
            "prompt_tokens": s.prompt_tokens,
            "generation_tokens": s.generation_tokens,
            "prefix_cache_queries": s.prefix_queries,
            "prefix_cache_hits": s.prefix_hits,
            "preemptions": s.preemptions,
            "kv_cache_usage": engine.kv_usage,
            "slipped_seconds": getattr(engine, "slipped_s", 0.0),
            "faults": self.faults.as_dict(),
        }

    async def _stats(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, dumps(self.stats()))

    async def _reset_peak(self, scope: Scope, receive: Receive, send: Send) -> None:
        await read_body(receive)
        self.engine.reset_peak()
        self.request_log.clear()
        await respond(send, 200, dumps(self.stats()))

    async def _requests(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every timed request since the last reset: user, priority, cache salt, arrival, end
        (monotonic)."""
        await respond(send, 200, dumps(list(self.request_log)))

    async def _traceparents(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, dumps(list(self.traceparents)))

    async def _get_faults(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, dumps(self.faults.as_dict()))

    async def _set_faults(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            data = json.loads(await read_body(receive) or b"{}")
            if not isinstance(data, dict):
                raise ValueError("expected an object")
            for name in ("health_fail", "error_500", "stall"):
                if name in data:
                    if not isinstance(data[name], bool):
                        raise ValueError(f"{name} must be a boolean")
                    setattr(self.faults, name, data[name])
            if "error_500_marker" in data:
                if not isinstance(data["error_500_marker"], str):
                    raise ValueError("error_500_marker must be a string")
                self.faults.error_500_marker = data["error_500_marker"]
        except ValueError as exc:
            await respond(send, 400, error_body(400, str(exc), "BadRequestError"))
            return
        await respond(send, 200, dumps(self.faults.as_dict()))

    # -- completions

    async def _faulted(self, body: bytes, receive: Receive, send: Send) -> bool:
        """Whether a fault switch answered this request (stalled it, or failed it with a 500)."""
        if self.faults.stall:
            await until_disconnect(receive)
            return True
        marker = self.faults.error_500_marker
        if self.faults.error_500 or (marker and marker.encode() in body):
            await respond(send, 500, error_body(500, "Simulated engine failure", "InternalServerError"))
            return True
        return False

    async def _embeddings(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._pooled(receive, send, lambda body: parse_embedding(body, self.config),
                           lambda request: embedding_body(request, self.config.model))

    async def _score(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._pooled(receive, send, lambda body: parse_score(body, self.config),
                           lambda request: score_body(request, self.config))

    async def _rerank(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._pooled(receive, send, lambda body: parse_rerank(body, self.config),
                           lambda request: rerank_body(request, self.config))

    async def _pooled(self, receive: Receive, send: Send, parse: Callable[[bytes], Any],
                      answer: Callable[[Any], bytes]) -> None:
        """A pooling request (embeddings, score, rerank): its texts' prefill, then the answer."""
        body = await read_body(receive)
        if await self._faulted(body, receive, send):
            return
        try:
            request = parse(body)
        except ApiError as error:
            await respond_error(send, error)
            return
        engine = self.engine
        if isinstance(engine, InstantEngine):
            engine.enter()
            try:
                await respond(send, 200, answer(request))
            finally:
                engine.leave(request.prompt_tokens, 0, "stop")
            return
        # The inputs' prefill, then nothing more: one sequence for them all, done after one token
        # (no longer than a sequence may be, or no KV budget could ever hold it).
        prefill = min(request.prompt_tokens, self.config.max_model_len - 1)
        seq = Sequence(prompt_len=prefill, block_hashes=[], max_tokens=1, target_tokens=1,
                       priority=request.priority, stream=False)
        engine.submit(seq)
        entry = {"user": request.user, "priority": request.priority, "cache_salt": "",
                 "arrived": seq.arrival, "ended": None, "outcome": None}
        self.request_log.append(entry)
        watcher = asyncio.ensure_future(receive())
        watcher.add_done_callback(lambda _: engine.abort(seq))
        try:
            await seq.wait()
            if seq.state is State.FINISHED:
                await respond(send, 200, answer(request))
        finally:
            watcher.cancel()
            engine.abort(seq)  # no-op once finished; frees the slot on any other way out
            entry["ended"] = time.monotonic()
            entry["outcome"] = seq.finish_reason

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._generate(receive, send, chat=True)

    async def _completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._generate(receive, send, chat=False)

    async def _generate(self, receive: Receive, send: Send, chat: bool) -> None:
        body = await read_body(receive)
        if await self._faulted(body, receive, send):
            return
        try:
            request = parse_request(body, chat, self.config)
        except ApiError as error:
            await respond_error(send, error)
            return
        writer = ReplyWriter(request, self.model_json, self.config.enable_prompt_tokens_details)
        if isinstance(self.engine, InstantEngine):
            await self._instant(request, writer, send)
        else:
            await self._timed(self.engine, request, writer, receive, send)

    async def _messages(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Anthropic's Messages API: a chat underneath, said in Anthropic's shapes."""
        body = await read_body(receive)
        if await self._faulted(body, receive, send):
            return
        try:
            request = parse_messages(body, self.config)
        except ApiError as error:
            await respond(send, error.status, messages_error_body(error))
            return
        writer = MessagesWriter(request, self.config.model, self.config.enable_prompt_tokens_details)
        if isinstance(self.engine, InstantEngine):
            await self._instant(request, writer, send)
        else:
            await self._timed(self.engine, request, writer, receive, send)

    async def _count_tokens(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await respond(send, 200, count_tokens_body(await read_body(receive), self.config))
        except ApiError as error:
            await respond(send, error.status, messages_error_body(error))

    async def _responses(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The Responses API: a chat underneath, stored in this server's memory (as vLLM's)."""
        body = await read_body(receive)
        if await self._faulted(body, receive, send):
            return
        try:
            request = parse_responses(body, self.config, self.stored_responses)
        except ApiError as error:
            await respond_error(send, error)
            return
        writer = ResponsesWriter(request, self.config.model, self.stored_responses)
        if isinstance(self.engine, InstantEngine):
            await self._instant(request.completion, writer, send)
        else:
            await self._timed(self.engine, request.completion, writer, receive, send)

    async def _stored_response(self, scope: Scope, receive: Receive, send: Send) -> None:
        response_id = scope["path"].removeprefix("/v1/responses/")
        stored = self.stored_responses.get(response_id)
        if stored is None:
            await respond_error(send, not_found(response_id))
        else:
            await respond(send, 200, dumps(stored.body))

    async def _instant(self, request: CompletionRequest, writer: Writer, send: Send) -> None:
        engine = self.engine
        assert isinstance(engine, InstantEngine)
        # Always max_tokens: a benchmark wants every reply the same size.
        n, reason = request.max_tokens, "length"
        engine.enter()
        try:
            if request.stream:
                # One write with every event: the bytes a client parses are the same as a
                # token-by-token stream, at a fraction of the cost.
                events = writer.role_event() if request.chat else ""
                events += writer.token_events(0, n, reason) + writer.tail_events(n)
                await respond(send, 200, events.encode(), SSE)
            else:
                await respond(send, 200, writer.full_body(self.config.model, n, reason))
        finally:
            engine.leave(request.prompt_tokens, n, reason)

    async def _timed(self, engine: Engine, request: CompletionRequest, writer: Writer,
                     receive: Receive, send: Send) -> None:
        seq = Sequence(
            prompt_len=request.prompt_tokens,
            block_hashes=(block_hashes(request.units, self.config.block_size, request.cache_salt)
                          if self.config.enable_prefix_caching else []),
            max_tokens=request.max_tokens,
            target_tokens=request.target_tokens,
            priority=request.priority,
            stream=request.stream,
        )
        engine.submit(seq)
        entry = {"user": request.user, "priority": request.priority, "cache_salt": request.cache_salt,
                 "arrived": seq.arrival, "ended": None, "outcome": None}
        self.request_log.append(entry)
        watcher = asyncio.ensure_future(receive())
        watcher.add_done_callback(lambda _: engine.abort(seq))
        try:
            if request.stream:
                await self._stream(seq, writer, send)
            else:
                await seq.wait()
                if seq.state is State.FINISHED:
                    assert seq.finish_reason is not None
                    await respond(send, 200, writer.full_body(self.config.model, seq.generated,
                                                              seq.finish_reason, seq.num_cached_tokens))
        finally:
            watcher.cancel()
            engine.abort(seq)  # no-op once finished; frees the slot on any other way out
            entry["ended"] = time.monotonic()
            entry["outcome"] = seq.finish_reason

    async def _stream(self, seq: Sequence, writer: Writer, send: Send) -> None:
        # Headers go out at once, as vLLM's streaming response does, before any token.
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        seen = 0
        while True:
            await seq.wait(seen)
            if seq.state is State.ABORTED:
                return
            produced = seq.generated
            last = seq.state is State.FINISHED
            events = writer.role_event() if seen == 0 and writer.request.chat else ""
            events += writer.token_events(seen, produced, seq.finish_reason if last else None)
            if last:
                events += writer.tail_events(produced, seq.num_cached_tokens)
            await send({"type": "http.response.body", "body": events.encode(),
                        "more_body": not last})
            seen = produced
            if last:
                return


async def until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
