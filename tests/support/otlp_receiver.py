"""A real OTLP/HTTP trace receiver on loopback: it takes POST /v1/traces as a collector does,
decodes each protobuf body with opentelemetry-proto's ExportTraceServiceRequest, and keeps the
spans for a test to read. It also counts the connections made to it, so a test can show that
nothing was exported at all."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_span_id: str  # "" for a root
    name: str
    kind: int  # opentelemetry.proto's Span.SpanKind: 2 server, 3 client
    attributes: dict[str, Any]
    events: tuple[str, ...]
    service: str
    start_ns: int
    end_ns: int
    status_code: int  # 2: error
    raw: bytes = field(repr=False)  # the span's own encoding, for searching every byte of it


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.connections = 0
        self.bodies = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._take(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def verify_request(self, request: Any, client_address: Any) -> bool:
                with receiver._lock:
                    receiver.connections += 1
                return True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        taken = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    taken.append(ReceivedSpan(
                        trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(), name=span.name, kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        events=tuple(e.name for e in span.events), service=str(resource.get("service.name", "")),
                        start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                        status_code=span.status.code, raw=span.SerializeToString(),
                    ))
        with self._lock:
            self.spans.extend(taken)
            self.bodies += 1

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def server_span(self, request_id: str) -> ReceivedSpan | None:
        with self._lock:
            return next((s for s in self.spans if s.attributes.get("gpuportal.request_id") == request_id), None)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def running() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    try:
        yield receiver
    finally:
        receiver.close()
