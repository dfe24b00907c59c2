"""Reading an engine's /metrics text: one `Snapshot` per scrape, `Rates` between two scrapes.

No Django imports, so the poller and the tests call it directly.
"""

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from fairness.telemetry.engine_kinds import ENGINES, Names

Series = list[tuple[dict[str, str], float]]


class MetricsParseError(ValueError):
    """The text is not Prometheus exposition format, or lacks the engine's load gauges."""


@dataclass(frozen=True)
class Snapshot:
    """One scrape of one replica. None: the engine does not export that figure."""

    running: float
    waiting: float
    waiting_capacity: float | None  # waiting because the KV cache is full
    kv_usage: float | None  # a 0–1 fraction
    # Counter totals since the engine started; only their differences mean anything.
    prefix_cache_queries: float | None  # in tokens
    prefix_cache_hits: float | None
    prompt_tokens: float | None
    generation_tokens: float | None
    preemptions: float | None
    requests_success: float | None  # finished requests, every finish reason
    block_size: int | None
    num_gpu_blocks: int | None  # over all data-parallel engines
    kv_capacity_tokens: int | None  # block_size × num_gpu_blocks, or the engine's own figure
    taken_at: float


# Snapshot's counter fields; a restart sets them all back to zero.
COUNTERS = (
    "prefix_cache_queries", "prefix_cache_hits", "prompt_tokens",
    "generation_tokens", "preemptions", "requests_success",
)


@dataclass(frozen=True)
class Rates:
    interval: float  # seconds
    generation_tokens_per_s: float | None
    prompt_tokens_per_s: float | None
    prefix_cache_hit_rate: float | None  # Δhits / Δqueries


def parse_metrics(text: str, kind: str, taken_at: float, model: str | None = None) -> Snapshot:
    """Read one scrape. Series are summed over the `engine` label (data-parallel ranks); with
    `model`, series labelled with another `model_name` are left out."""
    try:
        names = ENGINES[kind]
    except KeyError:
        raise ValueError(
            f"unknown engine kind {kind!r}; expected one of {sorted(ENGINES)}"
        ) from None
    index = _index(text, kind, model)

    running = _sum(_find(index, names.running))
    waiting = _sum(_find(index, names.waiting))
    if running is None or waiting is None:
        whose = f" for model {model!r}" if model is not None else ""
        raise MetricsParseError(
            f"no {names.running[0]} / {names.waiting[0]} series{whose} in the {kind} metrics"
        )

    block_size, num_gpu_blocks = _cache_config(_find(index, names.cache_config_info))
    if block_size is not None and num_gpu_blocks is not None:
        kv_capacity_tokens: int | None = block_size * num_gpu_blocks
    else:
        stated = _sum(_find(index, names.kv_capacity_tokens))
        kv_capacity_tokens = None if stated is None else int(stated)

    return Snapshot(
        running=running,
        waiting=waiting,
        waiting_capacity=_sum([
            (labels, value) for labels, value in _find(index, names.waiting_by_reason)
            if labels.get("reason") == "capacity"
        ]),
        kv_usage=_mean(_find(index, names.kv_usage)),
        prefix_cache_queries=_counter(index, names.prefix_cache_queries),
        prefix_cache_hits=_counter(index, names.prefix_cache_hits),
        prompt_tokens=_counter(index, names.prompt_tokens),
        generation_tokens=_counter(index, names.generation_tokens),
        preemptions=_counter(index, names.preemptions),
        requests_success=_counter(index, names.requests_success),
        block_size=block_size,
        num_gpu_blocks=num_gpu_blocks,
        kv_capacity_tokens=kv_capacity_tokens,
        taken_at=taken_at,
    )


def rates_between(prev: Snapshot, cur: Snapshot) -> Rates:
    """Throughput and prefix-cache hit rate over the interval between two scrapes."""
    interval = cur.taken_at - prev.taken_at
    if interval <= 0:
        return Rates(interval, None, None, None)
    restarted = _restarted(prev, cur)
    generated = _increase(prev.generation_tokens, cur.generation_tokens, restarted)
    prompted = _increase(prev.prompt_tokens, cur.prompt_tokens, restarted)
    queries = _increase(prev.prefix_cache_queries, cur.prefix_cache_queries, restarted)
    hits = _increase(prev.prefix_cache_hits, cur.prefix_cache_hits, restarted)
    return Rates(
        interval=interval,
        generation_tokens_per_s=None if generated is None else generated / interval,
        prompt_tokens_per_s=None if prompted is None else prompted / interval,
        prefix_cache_hit_rate=hits / queries if hits is not None and queries else None,
    )


def series_by_name(text: str, what: str) -> dict[str, Series]:
    """Every sample of an exporter that is not an engine (a GPU's), NaNs left out, by name;
    MetricsParseError, naming `what`, when the text is not Prometheus exposition format."""
    return _index(text, what, None)


def _index(text: str, kind: str, model: str | None) -> dict[str, Series]:
    """Every sample by its own name. Sample names keep `_total` where family names lose it."""
    index: dict[str, Series] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if model is not None and sample.labels.get("model_name", model) != model:
                    continue
                # One NaN would poison every sum and every rate computed from it.
                if math.isnan(sample.value):
                    continue
                index.setdefault(sample.name, []).append((sample.labels, float(sample.value)))
    except ValueError as exc:
        # The parser quotes the offending line, which may be a whole HTML error page.
        detail = str(exc)[:200]
        raise MetricsParseError(f"{kind} metrics are not Prometheus text format: {detail}") from exc
    return index


def _find(index: dict[str, Series], names: Names) -> Series:
    """The series of the first name that has any, so a deprecated alias is not added twice."""
    for name in names:
        if name in index:
            return index[name]
    return []


def _counter(index: dict[str, Series], names: Names) -> float | None:
    # A counter family `x` is exposed as `x_total` by prometheus_client and most engines,
    # but as plain `x` by an exporter that writes no TYPE line.
    return _sum(_find(index, tuple(c for n in names for c in (f"{n}_total", n))))


def _sum(series: Series) -> float | None:
    return math.fsum(value for _, value in series) if series else None


def _mean(series: Series) -> float | None:
    # Each data-parallel rank reports the fraction of its own, equal-sized KV pool.
    return math.fsum(value for _, value in series) / len(series) if series else None


def _cache_config(series: Series) -> tuple[int | None, int | None]:
    """Block size, and GPU blocks summed over engines (one info series per rank)."""
    block_size: int | None = None
    blocks_by_engine: dict[str, int] = {}
    for labels, _ in series:
        size = _int_label(labels, "block_size")
        if size is not None:
            block_size = size
        blocks = _int_label(labels, "num_gpu_blocks")
        if blocks is not None:
            blocks_by_engine[labels.get("engine", "")] = blocks
    num_gpu_blocks = sum(blocks_by_engine.values()) if blocks_by_engine else None
    return block_size, num_gpu_blocks


def _int_label(labels: dict[str, str], name: str) -> int | None:
    # An engine still profiling memory reports num_gpu_blocks="None".
    try:
        return int(labels[name])
    except (KeyError, ValueError):
        return None


def _restarted(prev: Snapshot, cur: Snapshot) -> bool:
    # A restart zeroes every counter of the engine at once. One counter that went down is
    # proof enough: the others may already have climbed back past their old values.
    for name in COUNTERS:
        before, after = getattr(prev, name), getattr(cur, name)
        if before is not None and after is not None and after < before:
            return True
    return False


def _increase(before: float | None, after: float | None, restarted: bool) -> float | None:
    if before is None or after is None:
        return None
    return after if restarted else after - before
