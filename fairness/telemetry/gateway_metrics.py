"""The gateway's own /metrics, the same whichever gateway process or host is scraped.

Counters and the queue-wait and latency buckets live in one Redis hash, bumped in the round trip
that already records each request's usage event (gateway/accounting.py); every answer's status
and reason is added to it by each process about once a second (gateway/process_counts.py). The gauges
(in flight, queued) come from admission's live state. A scrape reads both, so every process
answers with the totals of all of them and no multiprocess directory is needed. Redis here runs
without persistence: a Redis restart resets the counters, which Prometheus' rate() treats as
an ordinary counter reset. While Redis is away the scrape still answers, with
`gpuportal_redis_up 0` alone: the alert can tell Redis down from the gateway down (`up == 0`).
"""

from __future__ import annotations

import hmac
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any

import redis.exceptions
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from fairness.accounting import usage
from fairness.gateway.accounting import (
    USAGE_OUTBOX_DROPPED,
    USAGE_REJECTED,
    USAGE_REPUSHED,
    USAGE_RETRIED,
    WAIT_BUCKETS,
)
from fairness.gateway.latency_histograms import HISTOGRAMS, LatencyHistogram
from fairness.models import Tier
from fairness.scheduling.admission import admission_stats
from fairness.scheduling.live_counts import Stats
from fairness.store import keyspace
from fairness.store.redis_clients import redis_async
from fairness.telemetry import expected_waits, fleet_gauges

if TYPE_CHECKING:
    # prometheus_client leaves this one untyped: what the checker is to see.
    def floatToGoString(d: float) -> str: ...
else:
    from prometheus_client.utils import floatToGoString

_LE = {floatToGoString(b): i for i, b in enumerate(WAIT_BUCKETS)}


@dataclass(frozen=True)
class Snapshot:
    counters: dict[str, float]
    live: Stats
    tiers: list[str]  # every configured tier, so idle ones read 0 rather than vanish
    backlog: usage.Backlog = usage.Backlog(0, 0)
    fleet: fleet_gauges.Fleet = fleet_gauges.Fleet()
    waits: dict[str, float] = dataclass_field(default_factory=dict)  # model -> expected wait (s)


async def snapshot() -> Snapshot:
    raw: dict[Any, Any] = await redis_async().hgetall(keyspace.GATEWAY_COUNTERS)
    counters = {_str(k): float(v) for k, v in raw.items()}
    live = await admission_stats(redis_async())  # also reaps dead processes' leases
    tiers = [name async for name in Tier.objects.values_list("name", flat=True)]
    fleet = await fleet_gauges.read_fleet(redis_async())
    waits = await expected_waits.expected_waits(redis_async(), fleet_gauges.queued_per_model(fleet, live))
    return Snapshot(counters, live, tiers, await usage.read_backlog(redis_async()), fleet, waits)


class GatewayCollector(Collector):
    """Turns one snapshot into metric families (prometheus-client's collectors are sync, so the
    async view reads Redis first and hands the result over)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "gpuportal_requests",
            "Requests that reached admission, by the status the client got.",
            labels=["tier", "status", "endpoint"],
        )
        tokens = CounterMetricFamily(
            "gpuportal_tokens", "Tokens the engines reported, by tier.", labels=["tier", "kind"]
        )
        rejections = CounterMetricFamily(
            "gpuportal_rejections",
            "429 answers: queue_full, queue_timeout (admission) or engine.",
            labels=["tier", "reason"],
        )
        upstream = CounterMetricFamily(
            "gpuportal_upstream_errors",
            "Requests that ended in an engine failure or timeout (502/504), by the last replica tried.",
            labels=["replica"],
        )
        answers = CounterMetricFamily(
            "gpuportal_http_requests",
            "Every answer of the gateway's API, refusals before admission included, by HTTP status "
            "and reason (the error's code; ok below 400; client_closed: the client left first).",
            labels=["status", "reason"],
        )
        buckets: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(WAIT_BUCKETS))
        sums: dict[str, float] = defaultdict(float)
        for field, value in sorted(self.snap.counters.items()):
            kind, _, rest = field.partition("|")
            parts = rest.split("|")
            if kind == "req" and len(parts) == 3:
                requests.add_metric(parts, value)
            elif kind == "tok" and len(parts) == 2:
                tokens.add_metric(parts, value)
            elif kind == "rej" and len(parts) == 2:
                rejections.add_metric(parts, value)
            elif kind == "uperr":
                upstream.add_metric([rest], value)
            elif kind == "wait" and len(parts) == 2 and parts[1] in _LE:
                buckets[parts[0]][_LE[parts[1]]] += value
            elif kind == "waitsum":
                sums[rest] += value
            elif kind == "http" and len(parts) == 2:
                answers.add_metric(parts, value)
        wait = HistogramMetricFamily(
            "gpuportal_queue_wait_seconds",
            "Time admitted requests waited in the gateway's queue.",
            labels=["tier"],
        )
        for tier, counts in sorted(buckets.items()):
            running, cumulative = 0.0, []
            for bound, amount in zip(WAIT_BUCKETS, counts, strict=True):
                running += amount
                cumulative.append((floatToGoString(bound), running))
            wait.add_metric([tier], cumulative, sums[tier])
        yield from (requests, tokens, rejections, upstream, answers, wait)
        for histogram in HISTOGRAMS:
            yield _latency_family(histogram, self.snap.counters)
        yield from self._usage_backlog()
        yield from self._live()
        yield from fleet_gauges.families(self.snap.fleet, self.snap.live)
        yield expected_waits.family(self.snap.waits)
        yield GaugeMetricFamily("gpuportal_redis_up", _REDIS_UP_HELP, value=1)

    def _usage_backlog(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "gpuportal_usage_backlog",
            "Usage events waiting for the flush task to write them to the database.",
            value=self.snap.backlog.queued,
        )
        yield CounterMetricFamily(
            "gpuportal_usage_events_dropped",
            "Usage events dropped because the backlog reached GP_USAGE_BACKLOG_MAX (no worker "
            "drained it); their requests are missing from the usage pages.",
            value=self.snap.backlog.dropped,
        )
        counters = self.snap.counters
        yield CounterMetricFamily(
            "gpuportal_usage_outbox_retried",
            "Usage events a gateway process kept while Redis could not take them, and pushed later.",
            value=counters.get(USAGE_RETRIED, 0.0),
        )
        yield CounterMetricFamily(
            "gpuportal_usage_outbox_dropped",
            "Usage events a gateway process dropped because its outbox reached GP_USAGE_OUTBOX_MAX "
            "while Redis was away (counted once Redis is back); their requests are missing.",
            value=counters.get(USAGE_OUTBOX_DROPPED, 0.0),
        )
        yield CounterMetricFamily(
            "gpuportal_usage_repushed",
            "Usage events pushed again because Redis restarted empty before they were flushed.",
            value=counters.get(USAGE_REPUSHED, 0.0),
        )
        yield CounterMetricFamily(
            "gpuportal_usage_events_rejected",
            "Usage events the flush set aside because they could not be read or the database "
            "refused their data; kept in Redis (keyspace.USAGE_REJECTED) for a person to look at.",
            value=counters.get(USAGE_REJECTED, 0.0),
        )
        yield GaugeMetricFamily(
            "gpuportal_usage_outbox_waiting",
            "Usage events gateway processes still hold for Redis, as they last reported it (a "
            "process reports only when Redis takes a batch, so this shows an outage draining).",
            value=self.snap.backlog.outbox_waiting,
        )

    def _live(self) -> Iterator[Metric]:
        live = self.snap.live
        in_flight = GaugeMetricFamily(
            "gpuportal_in_flight", "Requests running now.", labels=["tier"]
        )
        queued = GaugeMetricFamily(
            "gpuportal_queued", "Requests waiting in the gateway's queue.", labels=["tier"]
        )
        oldest = GaugeMetricFamily(
            "gpuportal_oldest_wait_seconds",
            "How long the oldest waiting request has waited.",
            labels=["tier"],
        )
        for tier in sorted({*self.snap.tiers, *live["tiers"]}):
            stats = live["tiers"].get(tier)
            in_flight.add_metric([tier], stats["in_flight"] if stats else 0)
            queued.add_metric([tier], stats["queued"] if stats else 0)
            oldest.add_metric([tier], stats["longest_wait"] if stats else 0.0)
        slots = GaugeMetricFamily(
            "gpuportal_slots",
            "Engine slots the healthy replicas offer, per model.",
            labels=["model"],
        )
        for group, offered in sorted(live["groups"].items()):
            slots.add_metric([group], offered["capacity"])
        yield from (in_flight, queued, oldest, slots)


def _latency_family(histogram: LatencyHistogram, counters: dict[str, float]) -> HistogramMetricFamily:
    """One latency histogram out of its fields (gateway/latency_histograms.py): the buckets made
    cumulative, the count their total, the sum from microseconds to seconds."""
    places = histogram.le_index()
    width = len(histogram.labels)
    buckets: dict[tuple[str, ...], list[float]] = defaultdict(lambda: [0.0] * len(histogram.buckets))
    sums: dict[tuple[str, ...], float] = defaultdict(float)
    for name, value in counters.items():
        kind, _, rest = name.partition("|")
        if kind == histogram.kind:
            le, *found = rest.split("|", width)  # the model, last, may hold a "|" of its own
            if le in places and len(found) == width:
                buckets[tuple(found)][places[le]] += value
        elif kind == histogram.kind + "sum":
            sums[tuple(rest.split("|", width - 1))] += value / 1_000_000
    family = HistogramMetricFamily(histogram.name, histogram.help, labels=list(histogram.labels))
    for key, counts in sorted(buckets.items()):
        running, cumulative = 0.0, []
        for bound, amount in zip(histogram.buckets, counts, strict=True):
            running += amount
            cumulative.append((floatToGoString(bound), running))
        family.add_metric(list(key), cumulative, sums[key])
    return family


_REDIS_UP_HELP = ("1 when this scrape could read the gateway's state in Redis; 0 when Redis is away "
                  "(admission, usage and every other series then fail, and are left out).")


async def exposition() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatewayCollector(await snapshot()))
    return generate_latest(registry)


def redis_away() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Gauge(GaugeMetricFamily("gpuportal_redis_up", _REDIS_UP_HELP, value=0)))
    return generate_latest(registry)


class _Gauge(Collector):
    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterator[Metric]:
        yield self.family


@require_GET
async def view(request: HttpRequest) -> HttpResponse:
    token = settings.GP_METRICS_TOKEN
    if token and not hmac.compare_digest(
        request.headers.get("authorization", "").encode(), f"Bearer {token}".encode()
    ):
        response = HttpResponse(
            "A bearer token is required.\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = "Bearer"
        return response
    try:
        body = await exposition()
    except (redis.exceptions.RedisError, OSError):
        # Not a 503: that reads as the gateway down (up == 0). The other series are left out,
        # not zeroed, so their graphs show a gap rather than a false calm.
        body = redis_away()
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
