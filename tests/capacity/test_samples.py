"""Turning one poll's scrapes of a model's replicas into one (running, tok/s) sample."""

from dataclasses import replace

from fairness.telemetry.capacity_model import Sample, sample_from_scrapes
from fairness.telemetry.metrics_parser import Snapshot

BASE = Snapshot(
    running=4, waiting=0, waiting_capacity=None, kv_usage=0.3,
    prefix_cache_queries=0, prefix_cache_hits=0, prompt_tokens=0,
    generation_tokens=10_000, preemptions=0, requests_success=0,
    block_size=16, num_gpu_blocks=64, kv_capacity_tokens=1024, taken_at=100.0,
)


def test_it_sums_sequences_and_throughput_over_the_replicas():
    first = (BASE, replace(BASE, taken_at=102.0, generation_tokens=10_800))
    second = (
        replace(BASE, running=6, taken_at=100.1),
        replace(BASE, running=6, taken_at=102.1, generation_tokens=11_000),
    )

    assert sample_from_scrapes([first, second]) == Sample(running=10, tokens_per_s=900.0)


def test_running_is_the_mean_over_the_interval():
    # The batch grew from 2 to 6 while the 1,000 tokens were generated.
    pair = (replace(BASE, running=2), replace(BASE, running=6, taken_at=102.0,
                                              generation_tokens=11_000))

    assert sample_from_scrapes([pair]) == Sample(running=4, tokens_per_s=500.0)


def test_a_replica_without_a_rate_spoils_the_poll():
    known = (BASE, replace(BASE, taken_at=102.0, generation_tokens=10_800))
    unknown = (replace(BASE, generation_tokens=None),
               replace(BASE, taken_at=102.0, generation_tokens=None))
    repeated = (BASE, BASE)  # no time passed

    assert sample_from_scrapes([known, unknown]) is None
    assert sample_from_scrapes([known, repeated]) is None
    assert sample_from_scrapes([]) is None
