"""OpenTelemetry traces: a live gateway told where a collector is (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
sends one trace per request to a real OTLP/HTTP receiver; the engine is handed the trace's
traceparent; a client's traceparent becomes the parent; and without the variables, or with the
SDK disabled, nothing is exported at all."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from fairness.gateway import tracing
from tests.support import otlp_receiver
from tests.support.cast import MODEL, Member
from tests.support.gateway_process import GatewayProcess
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.polling import wait_for
from tests.support.processes import start_gateway

PROMPT = "Tell me about the quiet harbour-9d41 at dawn"
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
SERVER, CLIENT = 2, 3  # opentelemetry.proto's SpanKind
ERROR = 2  # its Status.StatusCode


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    yield from otlp_receiver.running()


@pytest.fixture(scope="module")
def traced(live_db_url: str, receiver: OtlpReceiver) -> Iterator[GatewayProcess]:
    """A gateway whose spans go to `receiver`, exported every 50 ms."""
    process = start_gateway(live_db_url, name="traced", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=receiver.url,
                            OTEL_BSP_SCHEDULE_DELAY="50", OTEL_SERVICE_NAME="gateway-under-test")
    yield process
    process.stop()


def chat(gateway: GatewayProcess, member: Member, *, stream: bool = False,
         headers: dict[str, str] | None = None) -> tuple[httpx.Response, str]:
    """The response and, for a stream, its whole body."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 6, "stream": stream}
    sent = {"authorization": f"Bearer {member.secret}", **(headers or {})}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=sent, timeout=30) as response:
        text = response.read().decode()
    return response, text


def whole_trace(receiver: OtlpReceiver, request_id: str, names: set[str]) -> dict[str, ReceivedSpan]:
    """The request's spans by name, once every one of `names` has been exported."""
    def exported() -> dict[str, ReceivedSpan] | None:
        server = receiver.server_span(request_id)
        if server is None:
            return None
        spans = {s.name: s for s in receiver.trace(server.trace_id)}
        return spans if names <= set(spans) else None

    return wait_for(exported, timeout=15, what=f"the spans {sorted(names)} of {request_id}",
                    evidence=lambda: repr([(s.name, s.trace_id) for s in receiver.spans]))


def test_a_request_is_one_trace_of_server_key_admission_and_engine_spans(traced, receiver, replica, cast, sim):
    response, text = chat(traced, cast["alice"])
    assert response.status_code == 200, text
    usage = response.json()["usage"]
    name = f"chat {MODEL}"
    spans = whole_trace(receiver, response.headers["x-request-id"],
                        {"POST /v1/chat/completions", "gpuportal.key_check", "gpuportal.admission", name})
    server = spans["POST /v1/chat/completions"]
    assert server.kind == SERVER and server.parent_span_id == ""
    assert server.service == "gateway-under-test"
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.route"] == "/v1/chat/completions"
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["gpuportal.key.id"] == cast["alice"].key_id
    for child in ("gpuportal.key_check", "gpuportal.admission", name):
        assert spans[child].parent_span_id == server.span_id, child
    engine = spans[name]
    assert engine.kind == CLIENT
    assert engine.attributes["gen_ai.operation.name"] == "chat"
    assert engine.attributes["gen_ai.request.model"] == MODEL
    assert engine.attributes["gen_ai.provider.name"] == "vllm"
    assert engine.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"] > 0
    assert engine.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"] > 0
    assert engine.attributes["gen_ai.response.finish_reasons"] == [response.json()["choices"][0]["finish_reason"]]
    assert engine.attributes["gpuportal.replica"] == replica.name
    assert server.start_ns <= engine.start_ns <= engine.end_ns <= server.end_ns
    # The engine was handed the engine call's own context: vLLM's spans would sit beneath it.
    sent = [t.split("-") for t in httpx.get(sim.url + "/sim/traceparents", timeout=5).json()]
    assert [server.trace_id, engine.span_id] in [[trace_id, parent] for _, trace_id, parent, _ in sent]


def test_a_clients_traceparent_becomes_the_parent_of_a_streamed_request(traced, receiver, replica, cast):
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    response, text = chat(traced, cast["bob"], stream=True, headers={"traceparent": traceparent})
    assert response.status_code == 200 and "[DONE]" in text, text
    name = f"chat {MODEL}"
    spans = whole_trace(receiver, response.headers["x-request-id"],
                        {"POST /v1/chat/completions", name, "gpuportal.stream"})
    server = spans["POST /v1/chat/completions"]
    assert server.trace_id == CLIENT_TRACE
    assert server.parent_span_id == CLIENT_SPAN
    engine, stream = spans[name], spans["gpuportal.stream"]
    assert stream.parent_span_id == server.span_id
    assert "gen_ai.first_token" in engine.events
    assert engine.attributes["gen_ai.usage.output_tokens"] > 0
    assert stream.attributes["gpuportal.stream.finished"] is True
    assert engine.start_ns <= stream.start_ns <= stream.end_ns


def test_a_request_whose_client_trace_is_not_sampled_exports_no_span(traced, receiver, replica, cast):
    unsampled = "5ae1b3f2c4d5e6f708192a3b4c5d6e7f"
    response, text = chat(traced, cast["alice"], headers={"traceparent": f"00-{unsampled}-{CLIENT_SPAN}-00"})
    assert response.status_code == 200, text
    later, _ = chat(traced, cast["alice"])  # exported after the first would have been
    whole_trace(receiver, later.headers["x-request-id"], {"POST /v1/chat/completions", f"chat {MODEL}"})
    assert receiver.trace(unsampled) == []
    assert receiver.server_span(response.headers["x-request-id"]) is None


def test_a_refused_key_is_traced_without_its_secret_or_any_prompt(traced, receiver, replica, cast):
    forged = cast["carol"].secret[:-4] + "zzzz"
    response, _ = chat(traced, Member("mallory", "interactive", forged, 0, 0))
    assert response.status_code == 401
    spans = whole_trace(receiver, response.headers["x-request-id"], {"POST /v1/chat/completions",
                                                                    "gpuportal.key_check"})
    assert spans["gpuportal.key_check"].attributes["error.type"] == "invalid_api_key"
    assert spans["gpuportal.key_check"].status_code == ERROR
    # Every span exported so far, byte for byte: no prompt, no secret, nor its part past the prefix.
    served, _ = chat(traced, cast["alice"])
    whole_trace(receiver, served.headers["x-request-id"], {f"chat {MODEL}"})
    secrets = [cast[name].secret for name in ("alice", "bob", "carol")] + [forged]
    for span in receiver.spans:
        assert PROMPT.encode() not in span.raw and b"harbour-9d41" not in span.raw, span.name
        for secret in secrets:
            assert secret[-16:].encode() not in span.raw, span.name


def test_a_gateway_with_the_sdk_disabled_exports_nothing(live_db_url, receiver, replica, cast):
    """The endpoint named, but OTEL_SDK_DISABLED: no exporter is made, so nothing connects."""
    quiet = OtlpReceiver()
    gateway = start_gateway(live_db_url, name="untraced", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=quiet.url,
                            OTEL_BSP_SCHEDULE_DELAY="50", OTEL_SDK_DISABLED="true")
    try:
        response, text = chat(gateway, cast["alice"])
        assert response.status_code == 200, text
        # A traced gateway's spans of the same kind of request arrive within this window.
        traced_gateway_delay = 2.0
        with pytest.raises(AssertionError):
            wait_for(lambda: quiet.connections, timeout=traced_gateway_delay, what="a connection")
    finally:
        gateway.stop()
        quiet.close()
    assert quiet.connections == 0 and quiet.spans == []


def test_spans_still_buffered_are_exported_when_the_gateway_stops(live_db_url, replica, cast):
    """The batch processor's timer would wait a minute; the shutdown sends them at once."""
    late = OtlpReceiver()
    gateway = start_gateway(live_db_url, name="flushed", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=late.url,
                            OTEL_BSP_SCHEDULE_DELAY="60000")
    try:
        response, text = chat(gateway, cast["alice"])
        assert response.status_code == 200, text
        assert late.server_span(response.headers["x-request-id"]) is None  # still buffered
        gateway.stop()  # SIGTERM: the lifespan's shutdown flushes
        server = late.server_span(response.headers["x-request-id"])
        assert server is not None, gateway.log_tail()
        assert {s.name for s in late.trace(server.trace_id)} >= {"POST /v1/chat/completions", f"chat {MODEL}"}
    finally:
        gateway.stop()
        late.close()


@pytest.mark.parametrize(("environ", "wanted"), [
    ({}, False),
    ({"OTEL_SERVICE_NAME": "gw"}, False),  # a name alone exports nothing
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "TRUE"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
])
def test_traces_are_on_only_when_the_environment_names_a_collector(environ, wanted):
    assert tracing.wanted(environ) is wanted


def test_without_a_collector_starting_leaves_tracing_off(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert tracing.start() is False
    assert tracing.ENABLED is False and tracing._sink is None


@pytest.mark.parametrize(("path", "route"), [
    ("/v1/chat/completions", "/v1/chat/completions"),
    ("/v1/models/org/some-model", "/v1/models/{model}"),
    ("/v1/files/file-abc/content", "/v1/files/{file_id}/content"),
    ("/v1/batches/batch_1/cancel", "/v1/batches/{batch_id}/cancel"),
    ("/v1/responses/resp_1", "/v1/responses/{response_id}"),
    ("/v1/messages/count_tokens", "/v1/messages/count_tokens"),
])
def test_a_paths_route_names_no_model_file_or_batch(path, route):
    assert tracing.route_of(path) == route
