"""Engine statistics and their Prometheus exposition under vLLM V1's names.

The engine bumps plain integers (cheap enough for ``--instant`` at thousands of requests per
second); a custom collector on a per-server ``CollectorRegistry`` turns them into metric families
only when ``/metrics`` is scraped. Every series carries ``model_name`` and ``engine="0"``, except
``vllm:cache_config_info``, which (as in vLLM) carries ``engine`` and the cache settings.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

# vLLM's buckets, so dashboards built against a real engine read the same.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)
INTER_TOKEN_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)
FINISH_REASONS = ("stop", "length", "abort")


class Histogram:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.total += value * n

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


@dataclass
class EngineStats:
    """Monotonic counters and histograms; the engine owns one and only ever adds to it."""

    requests_total: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    preemptions: int = 0
    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0))
    peak_running: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    queue_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    inter_token: Histogram = field(default_factory=lambda: Histogram(INTER_TOKEN_BUCKETS))


class EngineView(Protocol):
    """What the exposition reads from an engine (timed or instant)."""

    stats: EngineStats
    block_size: int
    num_gpu_blocks: int
    enable_prefix_caching: bool

    @property
    def num_running(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...

    @property
    def kv_usage(self) -> float: ...


class EngineCollector(Collector):
    def __init__(self, engine: EngineView, model_name: str) -> None:
        self.engine = engine
        self.model_name = model_name

    def collect(self) -> Iterator[Metric]:
        engine, stats = self.engine, self.engine.stats
        names = ["model_name", "engine"]
        values = [self.model_name, "0"]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=names)
            family.add_metric(values, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=names)
            family.add_metric(values, value)
            return family

        def histogram(name: str, doc: str, hist: Histogram) -> HistogramMetricFamily:
            family = HistogramMetricFamily(name, doc, labels=names)
            family.add_metric(values, hist.cumulative(), hist.total)
            return family

        waiting = engine.num_waiting
        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                    engine.num_running)
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                    waiting)
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason", "Number of requests waiting, by reason.",
            labels=[*names, "reason"],
        )
        by_reason.add_metric([*values, "capacity"], waiting)
        by_reason.add_metric([*values, "deferred"], 0)
        yield by_reason
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                    engine.kv_usage)
        yield counter("vllm:prefix_cache_queries",
                      "Prefix cache queries, in terms of number of queried tokens.",
                      stats.prefix_queries)
        yield counter("vllm:prefix_cache_hits",
                      "Prefix cache hits, in terms of number of cached tokens.", stats.prefix_hits)
        yield counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                      stats.preemptions)
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                      stats.prompt_tokens)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.",
                      stats.generation_tokens)
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        for reason, count in stats.finished.items():
            success.add_metric([*values, reason], count)
        yield success
        yield histogram("vllm:time_to_first_token_seconds",
                        "Histogram of time to first token in seconds.", stats.ttft)
        yield histogram("vllm:inter_token_latency_seconds",
                        "Histogram of inter-token latency in seconds.", stats.inter_token)
        yield histogram("vllm:e2e_request_latency_seconds",
                        "Histogram of e2e request latency in seconds.", stats.e2e)
        yield histogram("vllm:request_queue_time_seconds",
                        "Histogram of time spent in WAITING phase for request.", stats.queue_time)
        info = GaugeMetricFamily(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
            labels=["block_size", "enable_prefix_caching", "engine", "num_gpu_blocks"],
        )
        info.add_metric(
            [str(engine.block_size), str(engine.enable_prefix_caching), "0",
             str(engine.num_gpu_blocks)],
            1,
        )
        yield info


def build_registry(engine: EngineView, model_name: str) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(engine, model_name))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
