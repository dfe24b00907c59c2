"""OpenTelemetry traces of /v1/ requests: off unless the environment names an OTLP collector.

One trace per request: a server span for the whole exchange (its parent the client's own
`traceparent`, when it sends one), and under it the key check, admission (with the wait in the
queue beneath it), the engine call, named and described after the GenAI semantic conventions
(`chat {model}`, gen_ai.*), whose `traceparent` goes to the engine so that vLLM's own spans join
the trace, and, for a streamed answer, the stream.

Cost: with tracing off (the default) the request path pays one check of `ENABLED` at each place
it would trace, and this module creates nothing per request; the SDK is not even imported (the
API, a few small modules, is). On, the SDK's tracer cost a request about as much again as the rest of the
gateway's own work (a lock, the sampler, attribute checks and two copies per span): so the sampler
is asked once per request, the spans are assembled whole as the SDK's ReadableSpan when each
ends, with ids drawn as its RandomIdGenerator draws them, and handed to its BatchSpanProcessor,
which exports them off the event loop; its exporter writes OTLP's bytes itself (otlp_wire.py), at
a fraction of the cost of the library's message objects, which still cost the core the loop runs on.

The SDK reads its own variables (OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
OTEL_TRACES_SAMPLER, OTEL_BSP_*); this module only decides whether to set it up at all. Never
recorded: prompt or completion text, an API key or any part of it; a person or key by its id.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from fairness.gateway import otlp_wire

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import Sampler
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from fairness.gateway.api_keys import KeyInfo
    from fairness.gateway.sse_relay import StreamTally
    from fairness.scheduling.admission import Grant
    from fairness.scheduling.directory import ReplicaInfo

log = logging.getLogger(__name__)

# Read on the request path as `tracing.ENABLED`: True only between start() and stop() in a
# process whose environment names a collector.
ENABLED = False

SERVICE_NAME = "gpuportal-gateway"  # unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names one
PROVIDER = "vllm"  # gen_ai.provider.name (and the older gen_ai.system) of every engine call
# GenAI's gen_ai.operation.name for each endpoint (request_parsing's names); the pooling ones
# beyond embeddings have no name there, so they keep their own.
OPERATIONS = {"chat": "chat", "messages": "chat", "responses": "chat", "completions": "text_completion",
              "embeddings": "embeddings", "rerank": "rerank", "score": "score"}
SERVER, CLIENT, INTERNAL = SpanKind.SERVER, SpanKind.CLIENT, SpanKind.INTERNAL
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
OK, ERROR = Status(StatusCode.UNSET), Status(StatusCode.ERROR)
_PROPAGATOR = TraceContextTextMapPropagator()  # W3C traceparent and tracestate, nothing else

Attributes = dict[str, Any]
ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]],
                    Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]


@dataclass
class _Sink:
    """What start() set up: where assembled spans go, and what each carries."""

    provider: TracerProvider
    processor: BatchSpanProcessor
    sampler: Sampler
    resource: Resource
    scope: InstrumentationScope
    span: type[ReadableSpan]  # the SDK's, imported only when tracing is on
    event: type[Event]


_sink: _Sink | None = None


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint named (for traces, or for every
    signal), the SDK not disabled, and the traces' exporter not "none"."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
                or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip())


def start() -> bool:
    """Set up the tracer provider (its resource and sampler) and its batch processor with the OTLP/HTTP
    exporter, once per process, if `wanted()`. True when traces are on."""
    global ENABLED, _sink
    if _sink is not None or not wanted():
        return ENABLED
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    # shutdown_on_exit=False: stop() flushes at the lifespan's end, bounded; an atexit hook could
    # block the exit on a collector that does not answer.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    exporter = otlp_wire.span_exporter()
    processor = BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    _sink = _Sink(provider, processor, provider.sampler, provider.resource, InstrumentationScope("gpuportal.gateway"),
                  ReadableSpan, Event)
    ENABLED = True
    log.info("tracing: spans go to %s", getattr(exporter, "_endpoint", "the OTLP endpoint"))
    return True


async def stop(timeout: float = 3.0) -> None:
    """Export what is still buffered and stop, within `timeout` seconds (a collector that does
    not answer loses the last spans, not the shutdown)."""
    global ENABLED, _sink
    sink, ENABLED, _sink = _sink, False, None
    if sink is None:
        return
    try:
        await asyncio.wait_for(asyncio.to_thread(sink.provider.shutdown), timeout)
    except TimeoutError:
        log.warning("tracing: the last spans were not exported within %g s", timeout)


def _new_id(bits: int) -> int:
    """As the SDK's RandomIdGenerator draws them: never 0 (invalid)."""
    while True:
        drawn = random.getrandbits(bits)
        if drawn:
            return drawn


@dataclass
class _Request:
    """The trace of one request: its ids and its server span's attributes, filled in as it goes."""

    trace_id: int
    span_id: int
    trace_state: TraceState | None
    attributes: Attributes = field(default_factory=dict)


# The request whose server span is open in this task (and the tasks it starts: they copy it).
_current: contextvars.ContextVar[_Request | None] = contextvars.ContextVar("gpuportal_trace", default=None)


def _emit(request: _Request, name: str, span_id: int, parent_id: int | None, kind: SpanKind, start_ns: int,
          end_ns: int, attributes: Attributes, *, error: bool = False, events: tuple[tuple[str, int], ...] = (),
          remote_parent: bool = False) -> None:
    """One finished span, whole, to the batch processor."""
    sink = _sink
    if sink is None:
        return  # stopped while the request ran
    context = SpanContext(request.trace_id, span_id, False, SAMPLED, request.trace_state)
    parent = None if parent_id is None else SpanContext(
        request.trace_id, parent_id, remote_parent, SAMPLED, request.trace_state)
    sink.processor.on_end(sink.span(
        name, context=context, parent=parent, resource=sink.resource, attributes=attributes,
        events=[sink.event(event, timestamp=at) for event, at in events], kind=kind,
        status=ERROR if error else OK, start_time=start_ns, end_time=end_ns, instrumentation_scope=sink.scope,
    ))


def _traceparent(request: _Request, span_id: int) -> dict[str, str]:
    """W3C headers naming `span_id` of `request` as the parent."""
    headers = {"traceparent": f"00-{request.trace_id:032x}-{span_id:016x}-01"}
    if request.trace_state:
        headers["tracestate"] = request.trace_state.to_header()
    return headers


def _client_parent(scope: dict[str, Any]) -> SpanContext | None:
    """The client's traceparent (and tracestate), when valid."""
    carrier = {}
    for name, value in scope["headers"]:
        if name in (b"traceparent", b"tracestate"):
            carrier[name.decode("latin-1")] = value.decode("latin-1")
    if "traceparent" not in carrier:
        return None
    context = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return context if context.is_valid else None


# The route of a path, for the server span's name and http.route: low cardinality, so a path that
# names a model, a response, a file or a batch has its name replaced.
_NAMED = {"/v1/models/": "{model}", "/v1/responses/": "{response_id}", "/v1/files/": "{file_id}",
          "/v1/batches/": "{batch_id}"}
_TAILS = frozenset({"content", "cancel"})


def route_of(path: str) -> str:
    trimmed = path.rstrip("/") or "/"
    if trimmed == "/v1/messages/count_tokens":
        return trimmed
    for prefix, name in _NAMED.items():
        if trimmed.startswith(prefix):
            if prefix == "/v1/models/":  # a model's id may itself hold a slash
                return prefix + name
            tail = trimmed[len(prefix):].split("/")[1:]
            return prefix + name + ("/" + tail[-1] if tail and tail[-1] in _TAILS else "")
    return trimmed


async def serve(app: ASGIApp, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """Run `app` for one /v1/ request inside its server span, when the sampler keeps it."""
    sink = _sink
    if sink is None:
        return await app(scope, receive, send)
    started = time.time_ns()
    parent = _client_parent(scope)
    trace_id = parent.trace_id if parent is not None else _new_id(128)
    method, route = scope["method"], route_of(scope["path"])
    name = f"{method} {route}"
    sampled = sink.sampler.should_sample(
        trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent is not None else None,
        trace_id, name, SpanKind.SERVER,
    ).decision.name == "RECORD_AND_SAMPLE"
    if not sampled:
        return await app(scope, receive, send)
    # Few attributes: encoding each one on export costs the process about as much as making it.
    request = _Request(trace_id, _new_id(64), parent.trace_state if parent is not None else None,
                       {"http.request.method": method, "http.route": route, "url.path": scope["path"]})
    attributes = request.attributes
    if scope.get("client"):
        attributes["client.address"] = scope["client"][0]
    status = 0

    async def traced_send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            for header, value in message["headers"]:
                if header == b"x-request-id":
                    attributes["gpuportal.request_id"] = value.decode("latin-1")
        await send(message)

    token = _current.set(request)
    failed = False
    try:
        await app(scope, receive, traced_send)
    except BaseException as exc:
        attributes["error.type"], failed = type(exc).__qualname__, True
        raise
    finally:
        _current.reset(token)
        if status:
            attributes["http.response.status_code"] = status
        if status >= 500:  # a server span's 4xx is the client's, not an error of the server
            attributes["error.type"], failed = str(status), True
        elif status == 0 and not failed:
            attributes["error.type"] = "client_gone"  # it left before any answer
        _emit(request, name, request.span_id, parent.span_id if parent is not None else None, SERVER, started,
              time.time_ns(), attributes, error=failed, remote_parent=True)


async def key_check(checking: Awaitable[KeyInfo]) -> KeyInfo:
    """The key check, as a span; on the server span, whose key it is (its id, never its secret)."""
    request = _current.get()
    if request is None:
        return await checking
    started = time.time_ns()
    try:
        key = await checking
    except BaseException as exc:
        _emit(request, "gpuportal.key_check", _new_id(64), request.span_id, INTERNAL, started, time.time_ns(),
              {"error.type": str(getattr(exc, "code", None) or type(exc).__qualname__)}, error=True)
        raise
    _emit(request, "gpuportal.key_check", _new_id(64), request.span_id, INTERNAL, started, time.time_ns(), {})
    request.attributes["gpuportal.key.id"] = key.id
    request.attributes["gpuportal.tier"] = key.tier.name
    return key


def request_trace(key: KeyInfo, endpoint: str, model: str, stream: bool,
                  completion_limit: int | None = None) -> RequestTrace | None:
    """The spans of a proxied request within the server span open in this task; None outside one
    (a batch line) or when the sampler dropped the request."""
    request = _current.get()
    return None if request is None else RequestTrace(request, key, endpoint, model, stream, completion_limit)


class RequestTrace:
    """The spans of one proxied request below its server span: admission (and the wait in the
    queue), each engine call, the stream. Made only when tracing is on."""

    def __init__(self, request: _Request, key: KeyInfo, endpoint: str, model: str, stream: bool,
                 completion_limit: int | None = None) -> None:
        self.request = request
        # Whom the request counts as, once a front end's key has named its person.
        request.attributes.update({"gpuportal.person.id": key.person_id, "gpuportal.key.id": key.id,
                                   "gpuportal.tier": key.tier.name})
        self.operation = OPERATIONS.get(endpoint, endpoint)
        self.model = model
        self.stream = stream
        self.completion_limit = completion_limit
        self._engine: tuple[int, int, Attributes] | None = None  # span id, start, attributes
        # perf_counter stamps (the tally's) become span times through this pair.
        self._epoch_ns, self._perf = time.time_ns(), time.perf_counter()

    def _ns(self, perf: float) -> int:
        return self._epoch_ns + int((perf - self._perf) * 1e9)

    async def admission(self, acquiring: Awaitable[Grant]) -> Grant:
        """Admission as a span, and the wait in the queue under it when the request waited."""
        request, span_id, started = self.request, _new_id(64), time.time_ns()
        try:
            grant = await acquiring
        except BaseException as exc:
            _emit(request, "gpuportal.admission", span_id, request.span_id, INTERNAL, started, time.time_ns(),
                  {"error.type": type(exc).__qualname__}, error=True)
            raise
        ended = time.time_ns()
        waited_ms = round(grant.queued_seconds * 1000)
        _emit(request, "gpuportal.admission", span_id, request.span_id, INTERNAL, started, ended,
              {"gpuportal.replica": grant.replica, "gpuportal.admission.borrowed": grant.borrowed,
               "gpuportal.queue.waited_ms": waited_ms})
        if grant.queued_seconds > 0:
            waited: Attributes = {"gpuportal.queue.waited_ms": waited_ms}
            if grant.queue_estimate is not None:
                waited["gpuportal.queue.estimate_ms"] = round(grant.queue_estimate * 1000)
            if grant.held_by:
                waited["gpuportal.queue.held_by"] = grant.held_by
            _emit(request, "gpuportal.queue_wait", _new_id(64), span_id, INTERNAL,
                  max(started, ended - int(grant.queued_seconds * 1e9)), ended, waited)
        return grant

    def engine_call(self, replica: ReplicaInfo) -> dict[str, str]:
        """The engine call starts (a CLIENT span, GenAI's `{operation} {model}`): the headers
        that carry its context to the engine. An earlier attempt's ends here, failed."""
        if self._engine is not None:
            span_id, started, attributes = self._engine
            attributes["error.type"] = "retried_elsewhere"
            _emit(self.request, f"{self.operation} {self.model}", span_id, self.request.span_id, CLIENT, started,
                  time.time_ns(), attributes, error=True)
        where = urlsplit(replica.base_url)
        attributes = {
            "gen_ai.operation.name": self.operation, "gen_ai.provider.name": PROVIDER, "gen_ai.system": PROVIDER,
            "gen_ai.request.model": self.model, "gpuportal.replica": replica.name,
            "server.address": where.hostname or "",
            "server.port": where.port or (443 if where.scheme == "https" else 80),
        }
        if self.completion_limit is not None:
            attributes["gen_ai.request.max_tokens"] = self.completion_limit
        span_id = _new_id(64)
        self._engine = (span_id, time.time_ns(), attributes)
        return _traceparent(self.request, span_id)

    def finish_reasons(self, answer: Any) -> None:
        """A whole answer's finish reasons (its choices', or Anthropic's stop_reason)."""
        if self._engine is None or not isinstance(answer, dict):
            return
        reasons = [c.get("finish_reason") for c in answer.get("choices") or () if isinstance(c, dict)]
        if isinstance(answer.get("stop_reason"), str):
            reasons.append(answer["stop_reason"])
        kept = [r for r in reasons if isinstance(r, str)]
        if kept:
            self._engine[2]["gen_ai.response.finish_reasons"] = kept

    def closed(self, event: Mapping[str, Any], tally: StreamTally | None) -> None:
        """The request ended (lifecycle.close): the engine call ends with its counts and the first
        token as an event; a streamed answer's stream is a span from its first byte to here."""
        if self._engine is None:
            return
        (span_id, started, attributes), self._engine = self._engine, None
        now = time.time_ns()
        status = int(event["status"])
        attributes.update({"gen_ai.usage.input_tokens": int(event["prompt_tokens"]),
                           "gen_ai.usage.output_tokens": int(event["completion_tokens"]),
                           "http.response.status_code": status})
        if event.get("cached_tokens"):
            attributes["gen_ai.usage.cache_read.input_tokens"] = int(event["cached_tokens"])
        first = tally.first_byte_at if tally is not None else None
        failed = status >= 400
        if failed:
            attributes["error.type"] = str(event.get("ended") or status)
        _emit(self.request, f"{self.operation} {self.model}", span_id, self.request.span_id, CLIENT, started, now,
              attributes, error=failed, events=() if first is None else (("gen_ai.first_token", self._ns(first)),))
        if self.stream and first is not None and tally is not None:
            streamed: Attributes = {"gpuportal.stream.events": tally.content_events,
                                    "gpuportal.stream.finished": tally.finished}
            broken = tally.failed or not tally.finished
            if broken:
                streamed["error.type"] = "upstream_stream_broken" if tally.failed else "client_gone"
            _emit(self.request, "gpuportal.stream", _new_id(64), self.request.span_id, INTERNAL, self._ns(first),
                  now, streamed, error=broken)
