"""OTLP's protobuf bytes for a batch of finished spans, written straight from the spans.

The OTLP exporter's own encoder builds a protobuf object for every span, attribute and value
before it serialises them: 37 µs a span here, about 150 µs of its thread's CPU for each traced
request, and on the gateway's core that was most of what tracing added to a request. Writing the
wire format directly costs a fraction of that (bench/otlp_wire.py); the bytes decode to the same
message as the library's (tests/proxy/test_otlp_wire.py checks it).

Message and field numbers are those of opentelemetry-proto's trace.proto and common.proto
(ExportTraceServiceRequest > ResourceSpans > ScopeSpans > Span). Default scalars are left out, as
protobuf leaves them out; a value inside AnyValue (a oneof) is always written.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

log = logging.getLogger(__name__)

_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # SpanFlags: whether the parent is remote is known / it is
_FLAGS_TAG = b"\x85\x01"  # field 16, fixed32
_double = struct.Struct("<d").pack
_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack


def _varint(value: int) -> bytes:
    value &= 0xFFFF_FFFF_FFFF_FFFF  # an int64 below zero is sent as its two's complement
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SHORT = [_varint(n) for n in range(1 << 14)]  # every length a span's parts have, looked up


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
    size = len(payload)
    return tag + (_SHORT[size] if size < 16384 else _varint(size)) + payload


def _string(tag: bytes, text: str) -> bytes:
    return _length_delimited(tag, text.encode())


# Tags, (field << 3 | wire type): 0 varint, 1 fixed64, 2 length-delimited.
_KEY, _VALUE = _tag(1, 2), _tag(2, 2)  # KeyValue
_STRING, _BOOL, _INT, _DOUBLE, _ARRAY, _BYTES = (  # AnyValue
    _tag(1, 2), _tag(2, 0), _tag(3, 0), _tag(4, 1), _tag(5, 2), _tag(7, 2))
_ARRAY_VALUE = _tag(1, 2)  # ArrayValue.values
_TRACE_ID, _SPAN_ID, _TRACE_STATE, _PARENT_ID, _NAME = (_tag(n, 2) for n in (1, 2, 3, 4, 5))  # Span
_KIND, _START, _END, _ATTRIBUTE = _tag(6, 0), _tag(7, 1), _tag(8, 1), _tag(9, 2)
_EVENT, _STATUS = _tag(11, 2), _tag(15, 2)
_DROPPED_ATTRIBUTES, _DROPPED_EVENTS, _DROPPED_LINKS = _tag(10, 0), _tag(12, 0), _tag(14, 0)
_EVENT_TIME, _EVENT_NAME, _EVENT_ATTRIBUTE, _EVENT_DROPPED = _tag(1, 1), _tag(2, 2), _tag(3, 2), _tag(4, 0)
_STATUS_MESSAGE, _STATUS_CODE = _tag(2, 2), _tag(3, 0)
_RESOURCE_ATTRIBUTE = _tag(1, 2)  # Resource.attributes
_SCOPE_NAME, _SCOPE_VERSION, _SCOPE_ATTRIBUTE = _tag(1, 2), _tag(2, 2), _tag(3, 2)  # InstrumentationScope
_RESOURCE, _SCOPE_SPANS, _SCHEMA_URL = _tag(1, 2), _tag(2, 2), _tag(3, 2)  # ResourceSpans
_SCOPE, _SPAN = _tag(1, 2), _tag(2, 2)  # ScopeSpans (its schema_url is field 3 too)
_RESOURCE_SPANS = _tag(1, 2)  # ExportTraceServiceRequest


def _any_value(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return _string(_STRING, value)
    if isinstance(value, bool):  # before int: a bool is an int
        return _BOOL + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return _INT + _varint(value)
    if isinstance(value, float):
        return _DOUBLE + _double(value)
    if isinstance(value, bytes):
        return _length_delimited(_BYTES, value)
    if isinstance(value, Sequence):
        items = b"".join(_length_delimited(_ARRAY_VALUE, _any_value(item)) for item in value)
        return _length_delimited(_ARRAY, items)
    raise TypeError(f"an attribute value of type {type(value).__name__} is not one OTLP spans carry here")


# KeyValue bytes by (key, value): a gateway's spans repeat most of theirs (names, models, tiers,
# replicas, statuses). Bounded: emptied when full.
_KEY_VALUES: dict[tuple[str, type, Any], bytes] = {}
_KEY_VALUES_MAX = 4096


def _key_value(key: str, value: Any) -> bytes:
    if isinstance(value, list | tuple):
        return _string(_KEY, key) + _length_delimited(_VALUE, _any_value(value))
    cache_key = (key, type(value), value)  # the type too: True and 1 are equal keys
    encoded = _KEY_VALUES.get(cache_key)
    if encoded is None:
        encoded = _string(_KEY, key) + _length_delimited(_VALUE, _any_value(value))
        if len(_KEY_VALUES) >= _KEY_VALUES_MAX:
            _KEY_VALUES.clear()
        _KEY_VALUES[cache_key] = encoded
    return encoded


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    if not attributes:
        return b""
    return b"".join([_length_delimited(tag, _key_value(key, value)) for key, value in attributes.items()])


def _span(span: ReadableSpan) -> bytes:
    context = span.context
    assert context is not None
    parts = [
        _TRACE_ID, b"\x10", context.trace_id.to_bytes(16, "big"),
        _SPAN_ID, b"\x08", context.span_id.to_bytes(8, "big"),
    ]
    if context.trace_state:
        parts.append(_string(_TRACE_STATE, ",".join(f"{k}={v}" for k, v in context.trace_state.items())))
    parent = span.parent
    if parent is not None:
        parts += (_PARENT_ID, b"\x08", parent.span_id.to_bytes(8, "big"))
    parts.append(_string(_NAME, span.name))
    parts += (_KIND, _varint(span.kind.value + 1))  # the proto's enum counts UNSPECIFIED first
    if span.start_time:
        parts += (_START, _fixed64(span.start_time))
    if span.end_time:
        parts += (_END, _fixed64(span.end_time))
    parts.append(_attributes(_ATTRIBUTE, span.attributes))
    if span.dropped_attributes:
        parts += (_DROPPED_ATTRIBUTES, _varint(span.dropped_attributes))
    for event in span.events:
        body = _EVENT_TIME + _fixed64(event.timestamp) if event.timestamp else b""
        body += _string(_EVENT_NAME, event.name) if event.name else b""
        body += _attributes(_EVENT_ATTRIBUTE, event.attributes)
        if event.dropped_attributes:
            body += _EVENT_DROPPED + _varint(event.dropped_attributes)
        parts.append(_length_delimited(_EVENT, body))
    if span.dropped_events:
        parts += (_DROPPED_EVENTS, _varint(span.dropped_events))
    if span.links:
        raise TypeError("span links are not written here: the gateway's spans have none")
    if span.dropped_links:
        parts += (_DROPPED_LINKS, _varint(span.dropped_links))
    status = span.status
    body = _string(_STATUS_MESSAGE, status.description) if status.description else b""
    if status.status_code.value:
        body += _STATUS_CODE + _varint(status.status_code.value)
    parts.append(_length_delimited(_STATUS, body))
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if parent is not None and parent.is_remote else 0)
    parts += (_FLAGS_TAG, _fixed32(flags))
    return b"".join(parts)


def _resource(resource: Resource) -> bytes:
    return _length_delimited(_RESOURCE, _attributes(_RESOURCE_ATTRIBUTE, resource.attributes))


def _scope(scope: InstrumentationScope | None) -> bytes:
    if scope is None:
        return _length_delimited(_SCOPE, b"")  # present and empty, as the library writes it
    body = _string(_SCOPE_NAME, scope.name) if scope.name else b""
    body += _string(_SCOPE_VERSION, scope.version) if scope.version else b""
    body += _attributes(_SCOPE_ATTRIBUTE, scope.attributes)
    return _length_delimited(_SCOPE, body)


def encode(spans: Iterable[ReadableSpan]) -> bytes:
    """An ExportTraceServiceRequest holding `spans`, grouped by resource, then by scope."""
    grouped: dict[Any, dict[Any, list[bytes]]] = {}
    for span in spans:
        by_scope = grouped.setdefault(span.resource, {})
        by_scope.setdefault(span.instrumentation_scope or None, []).append(_length_delimited(_SPAN, _span(span)))
    out = []
    for resource, by_scope in grouped.items():
        body = [_resource(resource)]
        for scope, encoded in by_scope.items():
            schema = scope.schema_url if scope is not None else ""
            scope_spans = _scope(scope) + b"".join(encoded) + (_string(_SCHEMA_URL, schema) if schema else b"")
            body.append(_length_delimited(_SCOPE_SPANS, scope_spans))
        if resource.schema_url:
            body.append(_string(_SCHEMA_URL, resource.schema_url))
        out.append(_length_delimited(_RESOURCE_SPANS, b"".join(body)))
    return b"".join(out)


def span_exporter() -> SpanExporter:
    """The SDK's OTLP/HTTP exporter (its endpoint, headers, compression, timeout and retries from
    the OTEL_EXPORTER_OTLP_* variables), its batches encoded by `encode`. Imported when called:
    with tracing off the SDK is never loaded."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    class WireSpanExporter(OTLPSpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            # The library's export() with `encode` in place of its message objects.
            if self._shutdown:
                return SpanExportResult.FAILURE
            with self._metrics.export_operation(len(spans)) as result:
                try:
                    data = encode(spans)
                except Exception as error:  # a value no span should carry: drop the batch, not the thread
                    log.error("tracing: could not encode %d spans: %s", len(spans), error)
                    result.error = error
                    return SpanExportResult.FAILURE
                if 0 < self._max_request_size < len(data):
                    log.warning("tracing: dropped %d spans: %d bytes exceed the request size limit, %d",
                                len(spans), len(data), self._max_request_size)
                    return SpanExportResult.FAILURE
                sent = self._client.export(data)
                if not sent.success:
                    result.error = sent.error
                    return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

    return WireSpanExporter()
