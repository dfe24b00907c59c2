"""Rates between two scrapes: throughput, interval hit rate, engine restarts."""

from dataclasses import replace

import pytest

from fairness.telemetry.metrics_parser import Snapshot, rates_between

BASE = Snapshot(
    running=1, waiting=0, waiting_capacity=None, kv_usage=0.1,
    prefix_cache_queries=1000, prefix_cache_hits=400, prompt_tokens=2000,
    generation_tokens=10_000, preemptions=0, requests_success=10,
    block_size=16, num_gpu_blocks=64, kv_capacity_tokens=1024, taken_at=100.0,
)


def test_it_computes_token_throughput_over_the_interval():
    later = replace(BASE, taken_at=102.0, generation_tokens=10_400, prompt_tokens=2600)

    rates = rates_between(BASE, later)

    assert rates.interval == 2.0
    assert rates.generation_tokens_per_s == 200.0
    assert rates.prompt_tokens_per_s == 300.0


def test_hit_rate_covers_the_interval_not_the_engines_lifetime():
    # Lifetime 40 % hits; in this interval 90 of 100 queried tokens were cached.
    later = replace(BASE, taken_at=101.0, prefix_cache_queries=1100, prefix_cache_hits=490)

    assert rates_between(BASE, later).prefix_cache_hit_rate == pytest.approx(0.9)


def test_hit_rate_is_unknown_when_nothing_was_queried():
    later = replace(BASE, taken_at=101.0)

    rates = rates_between(BASE, later)

    assert rates.prefix_cache_hit_rate is None
    assert rates.generation_tokens_per_s == 0.0


def test_it_counts_from_zero_after_an_engine_restart():
    # Generation went down, so the engine restarted; prompt tokens (2,500) have since passed
    # their old value (2,000) but are also all new.
    later = replace(
        BASE, taken_at=110.0, generation_tokens=500, prompt_tokens=2500,
        prefix_cache_queries=200, prefix_cache_hits=50,
    )

    rates = rates_between(BASE, later)

    assert rates.generation_tokens_per_s == 50.0
    assert rates.prompt_tokens_per_s == 250.0
    assert rates.prefix_cache_hit_rate == 0.25


def test_a_restart_seen_on_any_counter_resets_them_all():
    # Only the request counter shows the restart; every other counter is past its old value.
    later = replace(
        BASE, taken_at=110.0, requests_success=3, generation_tokens=11_000,
        prefix_cache_queries=1200, prefix_cache_hits=600,
    )

    rates = rates_between(BASE, later)

    assert rates.generation_tokens_per_s == 1100.0
    assert rates.prefix_cache_hit_rate == 0.5


@pytest.mark.parametrize("taken_at", [100.0, 99.0], ids=["same-instant", "clock-went-back"])
def test_rates_are_unknown_without_a_positive_interval(taken_at):
    later = replace(BASE, taken_at=taken_at, generation_tokens=20_000)

    rates = rates_between(BASE, later)

    assert (rates.generation_tokens_per_s, rates.prompt_tokens_per_s) == (None, None)
    assert rates.prefix_cache_hit_rate is None


def test_rates_are_unknown_for_counters_the_engine_does_not_export():
    no_counters = replace(
        BASE, prefix_cache_queries=None, prefix_cache_hits=None, prompt_tokens=None,
    )
    later = replace(no_counters, taken_at=101.0, generation_tokens=10_100)

    rates = rates_between(no_counters, later)

    assert rates.generation_tokens_per_s == 100.0
    assert (rates.prompt_tokens_per_s, rates.prefix_cache_hit_rate) == (None, None)
