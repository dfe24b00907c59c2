"""The gauges Prometheus alerts on beside the gateway's counters (deploy/prometheus/alerts.yml):
each replica's health and slots, the gateway's queue per model, and when the engine poller last
polled. Read at scrape time from what the gateways and the poller already keep in Redis, so they
cost the request path nothing.

Replicas and models are labelled by the names the staff gave them (enabled replicas only), so the
series are as many as the replicas configured, whatever clients send.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import redis.asyncio
from prometheus_client.core import GaugeMetricFamily, Metric

from fairness.gateway.replica_rows import load_directory
from fairness.scheduling import health
from fairness.scheduling.directory import ReplicaInfo
from fairness.scheduling.live_counts import Stats
from fairness.store import keyspace


@dataclass(frozen=True)
class Fleet:
    replicas: list[ReplicaInfo] = field(default_factory=list)
    healthy: set[str] = field(default_factory=set)  # by the health probes' verdicts, as admission sees them
    last_poll: float | None = None  # epoch seconds of the poller's latest reading; None: none in Redis


async def read_fleet(client: redis.asyncio.Redis) -> Fleet:
    directory = await load_directory()
    healthy = await health.healthy(client, directory.all)
    polls = []
    for raw in await client.hvals(keyspace.TELEMETRY_LATEST):
        try:
            polls.append(float(json.loads(raw)["taken_at"]))
        except (ValueError, KeyError, TypeError):  # an unreadable reading must not fail the scrape
            continue
    return Fleet(directory.all, healthy, max(polls, default=None))


def queued_per_model(fleet: Fleet, live: Stats) -> dict[str, int]:
    """Requests waiting in the gateway's queue per model, every configured model (0 for none)."""
    per_model: dict[str, int] = defaultdict(int, {r.model: 0 for r in fleet.replicas})
    for group, figures in live["groups"].items():
        per_model[group.split("@")[0]] += figures["queued"]  # "model@replicas": a deployment of it
    return dict(per_model)


def families(fleet: Fleet, live: Stats) -> Iterator[Metric]:
    up = GaugeMetricFamily(
        "gpuportal_replica_up",
        "1 while the gateways send requests to the replica (its /health answers and requests do not "
        "fail there), 0 while it is held out as down.",
        labels=["replica", "model"],
    )
    slots = GaugeMetricFamily(
        "gpuportal_replica_slots",
        "Engine slots the replica offers admission now (its max_num_seqs; 0 while down).",
        labels=["replica", "model"],
    )
    in_flight = GaugeMetricFamily(
        "gpuportal_replica_in_flight", "Requests holding a slot on the replica.", labels=["replica", "model"]
    )
    for replica in sorted(fleet.replicas, key=lambda r: r.name):
        labels = [replica.name, replica.model]
        stats = live["replicas"].get(replica.name)
        up.add_metric(labels, 1 if replica.name in fleet.healthy else 0)
        slots.add_metric(labels, stats["capacity"] if stats else 0)
        in_flight.add_metric(labels, stats["in_flight"] if stats else 0)
    queued = GaugeMetricFamily(
        "gpuportal_model_queued",
        "Requests waiting in the gateway's queue for the model (every deployment of it).",
        labels=["model"],
    )
    for model, count in sorted(queued_per_model(fleet, live).items()):
        queued.add_metric([model], count)
    yield from (up, slots, in_flight, queued)
    if fleet.last_poll is not None:
        yield GaugeMetricFamily(
            "gpuportal_engine_poll_last_timestamp_seconds",
            "When the poller (Celery beat's poll task) last read the engines' /metrics, as a Unix time.",
            value=fleet.last_poll,
        )
