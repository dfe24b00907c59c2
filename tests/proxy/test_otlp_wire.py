"""The OTLP bytes the gateway writes itself decode to exactly the message the OpenTelemetry
library's own encoder builds, whatever a span holds."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from fairness.gateway import otlp_wire

RESOURCE = Resource({"service.name": "gpuportal-gateway", "host.name": "gw-1"})
SCOPE = InstrumentationScope("gpuportal.gateway")
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
UNSET = Status(StatusCode.UNSET)


def span(number: int, *, resource: Resource = RESOURCE, scope: InstrumentationScope | None = SCOPE,
         parent: SpanContext | None = None, attributes: dict | None = None, events: tuple[Event, ...] = (),
         status: Status = UNSET, kind: SpanKind = SpanKind.INTERNAL,
         trace_state: TraceState | None = None) -> ReadableSpan:
    return ReadableSpan(
        f"span {number}", context=SpanContext(0xABC0 + number, 0x10 + number, False, SAMPLED, trace_state),
        parent=parent, resource=resource, attributes=attributes or {}, events=list(events), kind=kind,
        status=status, start_time=1_765_000_000_000_000_000 + number, end_time=1_765_000_000_250_000_000 + number,
        instrumentation_scope=scope,
    )


def decoded(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(otlp_wire.encode(spans))


def test_the_gateways_spans_encode_as_the_library_encodes_them():
    server = SpanContext(0xABC1, 0x77, True, SAMPLED)  # a client's traceparent: a remote parent
    local = SpanContext(0xABC2, 0x78, False, SAMPLED)
    spans = [
        span(1, kind=SpanKind.SERVER, parent=server, attributes={
            "http.request.method": "POST", "http.route": "/v1/chat/completions", "http.response.status_code": 200,
        }),
        span(2, kind=SpanKind.CLIENT, parent=local, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "org/model", "server.port": 8000,
            "gen_ai.response.finish_reasons": ["stop", "length"], "gpuportal.stream.finished": True,
        }, events=(Event("gen_ai.first_token", timestamp=1_765_000_000_100_000_000),)),
        span(3, parent=local, status=Status(StatusCode.ERROR, "upstream timed out"),
             attributes={"error.type": "upstream_timeout", "gpuportal.admission.borrowed": False}),
        span(4, kind=SpanKind.PRODUCER, trace_state=TraceState([("vendor", "a1"), ("other", "b2")])),
        span(5, kind=SpanKind.CONSUMER, status=Status(StatusCode.OK)),
    ]
    assert decoded(spans) == encode_spans(spans)


@pytest.mark.parametrize("value", [
    "", "ünïcödé ✓", "x" * 20_000, True, False, 0, 1, -1, 2**63 - 1, -(2**63), 0.0, -2.5, 1e300,
    b"\x00\xff", [], ["a", "b"], [1, -2], [True, False], [0.5], ("t", "u"),
])
def test_every_attribute_value_a_span_may_carry_encodes_as_the_librarys(value):
    spans = [span(1, attributes={"k": value}), span(2, attributes={"k": value, "other": "v"})]
    assert decoded(spans) == encode_spans(spans)


def test_true_and_one_stay_apart_in_the_encoders_memory():
    spans = [span(1, attributes={"k": True}), span(2, attributes={"k": 1}), span(3, attributes={"k": 1.0})]
    assert decoded(spans) == encode_spans(spans)


def test_spans_group_by_resource_then_scope_with_their_schema_urls():
    other_resource = Resource({"service.name": "worker"}, schema_url="https://opentelemetry.io/schemas/1.24.0")
    versioned = InstrumentationScope("batch", "1.2", "https://opentelemetry.io/schemas/1.21.0", {"team": "ml"})
    spans = [span(1), span(2, resource=other_resource), span(3, scope=versioned), span(4, scope=None),
             span(5, resource=other_resource, scope=versioned),
             span(6, events=(Event("evt", attributes={"n": 3}, timestamp=5), Event("bare", timestamp=0)))]
    assert decoded(spans) == encode_spans(spans)
    assert [len(r.scope_spans) for r in decoded(spans).resource_spans] == [3, 2]


def test_a_value_no_span_may_carry_is_refused_not_mangled():
    with pytest.raises(TypeError, match="dict"):
        otlp_wire.encode([span(1, attributes={"k": {"nested": 1}})])
