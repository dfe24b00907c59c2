"""Encoding a batch of the gateway's spans for OTLP: the OpenTelemetry library's encoder (a
protobuf object per span, attribute and value, then serialised) against the gateway's own
(fairness/gateway/otlp_wire.py, the wire format written straight from the spans). Both run in this
process on the same batches of 512 spans (the batch processor's default export size) shaped as a
non-streamed chat request's four spans: server, key check, admission, engine call with its first
token. Interleaved rounds; the figure is the median of the per-round ratios. The encoding runs on
the exporter's thread, which on the gateway's core takes from the event loop.

    .venv/bin/python -m bench.otlp_wire [--rounds N]

Writes bench/results/otlp_wire.json.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from bench import report
from fairness.gateway import otlp_wire

BATCH = 512
TARGET_RATIO = 0.5  # the gateway's encoder at most half the library's time
RESOURCE = Resource.create({"service.name": "gpuportal-gateway"})
SCOPE = InstrumentationScope("gpuportal.gateway")
SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def request_spans(rng: random.Random) -> list[ReadableSpan]:
    """One request's spans, with the attributes the gateway gives them (tracing.py)."""
    trace_id, server_id = rng.getrandbits(128) or 1, rng.getrandbits(64) or 1
    start = time.time_ns()

    def one(name: str, kind: SpanKind, attributes: dict, parent: int | None, events: tuple = ()) -> ReadableSpan:
        return ReadableSpan(
            name, context=SpanContext(trace_id, rng.getrandbits(64) or 1, False, SAMPLED),
            parent=None if parent is None else SpanContext(trace_id, parent, False, SAMPLED), resource=RESOURCE,
            attributes=attributes, events=list(events), kind=kind, status=Status(StatusCode.UNSET),
            start_time=start, end_time=start + rng.randrange(1_000_000, 900_000_000), instrumentation_scope=SCOPE,
        )

    return [
        one("POST /v1/chat/completions", SpanKind.SERVER, {
            "http.request.method": "POST", "http.route": "/v1/chat/completions", "url.path": "/v1/chat/completions",
            "client.address": "127.0.0.1", "gpuportal.request_id": f"req-{rng.getrandbits(64):016x}",
            "gpuportal.key.id": rng.randrange(1, 50), "gpuportal.tier": "interactive",
            "gpuportal.person.id": rng.randrange(1, 50), "http.response.status_code": 200,
        }, None),
        one("gpuportal.key_check", SpanKind.INTERNAL, {}, server_id),
        one("gpuportal.admission", SpanKind.INTERNAL, {
            "gpuportal.replica": "gpu-a", "gpuportal.admission.borrowed": False, "gpuportal.queue.waited_ms": 0,
        }, server_id),
        one("chat tiny", SpanKind.CLIENT, {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm", "gen_ai.system": "vllm",
            "gen_ai.request.model": "tiny", "gpuportal.replica": "gpu-a", "server.address": "127.0.0.1",
            "server.port": 8000, "gen_ai.usage.input_tokens": rng.randrange(10, 2000),
            "gen_ai.usage.output_tokens": rng.randrange(1, 500), "http.response.status_code": 200,
            "gen_ai.response.finish_reasons": ["stop"],
        }, server_id, (Event("gen_ai.first_token", timestamp=start + 50_000_000),)),
    ]


def timed(encode: Callable[[list[ReadableSpan]], bytes], batches: list[list[ReadableSpan]]) -> float:
    """Microseconds a span, over these batches."""
    started = time.perf_counter()
    for batch in batches:
        encode(batch)
    return (time.perf_counter() - started) / sum(map(len, batches)) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    started = time.monotonic()
    rng = random.Random(7)
    batches = []
    for _ in range(8):
        spans: list[ReadableSpan] = []
        while len(spans) < BATCH:
            spans += request_spans(rng)
        batches.append(spans[:BATCH])
    assert otlp_wire.encode(batches[0]) == encode_spans(batches[0]).SerializeToString()  # the same bytes
    library = lambda batch: encode_spans(batch).SerializePartialToString()  # noqa: E731 - as the exporter calls it
    arms = {"library": library, "gateway": otlp_wire.encode}
    rounds: list[dict[str, float]] = []
    for number in range(args.rounds):
        order = list(arms) if number % 2 == 0 else list(reversed(arms))
        rounds.append({name: timed(arms[name], batches) for name in order})
    ratio = statistics.median(r["gateway"] / r["library"] for r in rounds)
    medians = {name: statistics.median(r[name] for r in rounds) for name in arms}
    print(report.table(["encoder", "µs a span (median of rounds)", "µs a request (4 spans)"],
                       [[name, report.fmt(us), report.fmt(4 * us)] for name, us in medians.items()],
                       title=f"OTLP encoding, batches of {BATCH} spans, {args.rounds} interleaved rounds"))
    targets = [report.target("gateway's encoder / library's (median of per-round ratios)", ratio, "<=", TARGET_RATIO,
                             "×", f"library {medians['library']:.1f} µs a span, gateway {medians['gateway']:.1f}")]
    print(report.targets_table(targets))
    results = {"environment": report.environment(), "rounds": rounds, "medians_us_per_span": medians,
               "ratio": ratio, "targets": targets, "seconds": time.monotonic() - started}
    print(f"wrote {report.write_json('otlp_wire', results)}")
    return 0 if all(t["ok"] for t in targets) else 1


if __name__ == "__main__":
    raise SystemExit(main())
