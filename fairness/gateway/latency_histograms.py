"""The latency histograms a finished request adds to: how long it took end to end, how long
until the engine's first token, and how fast the tokens came after it.

Like the queue-wait histogram (accounting.py), each request adds 1 to its own bucket and its
value to a sum; its process adds them up in memory and to Redis once a second (process_counts.py),
not in the round trip that records its usage event, where they were most of its commands. The
scrape makes the buckets cumulative and counts them (telemetry/gateway_metrics.py). Only admitted requests are
observed: a refusal takes no engine time, and `gpuportal_http_requests_total` counts it.

Fields, "|"-separated, the model last (a model's name is the staff's to choose and could hold
anything but a tier name, which is a slug):
    <kind>|<le>|<label>|...|<model>   and   <kind>sum|<label>|...|<model>  (microseconds)
Labels are bounded: the tier is the key's, and the model is the one a replica serves (a request
naming a model nobody serves is answered 404 before it has a lifecycle). Changing a histogram's
bounds strands its old fields: the scrape skips them until Redis is flushed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import utils as prometheus_utils

INF = float("inf")

# The `le` label as Prometheus spells it ("+Inf", "0.005"); prometheus_client leaves it unannotated.
le_label: Callable[[float], str] = prometheus_utils.floatToGoString


@dataclass(frozen=True)
class LatencyHistogram:
    kind: str  # the field prefix in the counters hash
    name: str  # the metric family's name, without _bucket/_sum/_count
    help: str
    labels: tuple[str, ...]  # the model is always the last
    buckets: tuple[float, ...]  # upper bounds in seconds, ending with +Inf

    def le_index(self) -> dict[str, int]:
        return {le_label(bound): i for i, bound in enumerate(self.buckets)}


# End to end, from milliseconds (an embedding, a refusal by the engine) to ten minutes (a long
# generation at a slow pace; the engine's own request timeout is of that order).
DURATION = LatencyHistogram(
    "dur", "gpuportal_request_duration_seconds",
    "Admitted requests from when the gateway had the request (key checked, body read) to the last "
    "byte of the answer, whatever its status.",
    ("tier", "model"),
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, INF),
)
# A prefill of a short prompt on an idle engine takes tens of ms; a long one behind a queue, minutes.
TTFT = LatencyHistogram(
    "ttft", "gpuportal_time_to_first_token_seconds",
    "Admitted requests from when the gateway had the request to the first byte of the engine's "
    "answer, queue wait included. Streamed (stream=\"true\"): the first token's chunk. Whole answers "
    "(stream=\"false\") arrive at once, so for them this is the time to the whole answer.",
    ("tier", "stream", "model"),
    (0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, INF),
)
# Decode pace per sequence: about 5-50 ms a token on a GPU, up to seconds on an overloaded or CPU one.
TPOT = LatencyHistogram(
    "tpot", "gpuportal_time_per_output_token_seconds",
    "Streamed answers that finished with at least 2 completion tokens: (last byte - first token) / "
    "(completion tokens - 1).",
    ("tier", "model"),
    (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, INF),
)
HISTOGRAMS = (DURATION, TTFT, TPOT)


def increments(
    *, tier: str, model: str, stream: bool, status: int, latency_ms: int, ttft_ms: int | None,
    completion_tokens: int,
) -> dict[str, int]:
    """The histogram fields one finished, admitted request adds to (its usage event's figures)."""
    fields: dict[str, int] = {}
    _observe(fields, DURATION, (tier, model), latency_ms / 1000)
    if ttft_ms is None:  # the engine sent nothing (it failed, or the client left first)
        return fields
    _observe(fields, TTFT, (tier, "true" if stream else "false", model), ttft_ms / 1000)
    # Only a finished stream's count is the engine's own, and only a stream's first token comes
    # before its last.
    if stream and status == 200 and completion_tokens >= 2:
        _observe(fields, TPOT, (tier, model), max(0, latency_ms - ttft_ms) / 1000 / (completion_tokens - 1))
    return fields


def _observe(fields: dict[str, int], histogram: LatencyHistogram, labels: tuple[str, ...], seconds: float) -> None:
    le = next(bound for bound in histogram.buckets if seconds <= bound)
    joined = "|".join(labels)
    fields[f"{histogram.kind}|{le_label(le)}|{joined}"] = 1
    # Whole microseconds: HINCRBY, cheaper for Redis than HINCRBYFLOAT, and exact when summed.
    fields[f"{histogram.kind}sum|{joined}"] = round(seconds * 1_000_000)
