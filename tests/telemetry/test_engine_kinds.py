"""Each engine kind's names land in the same Snapshot fields."""

import pytest

from fairness.telemetry.metrics_parser import Snapshot, parse_metrics

NOTHING = dict(
    waiting_capacity=None, kv_usage=None, prefix_cache_queries=None, prefix_cache_hits=None,
    prompt_tokens=None, generation_tokens=None, preemptions=None, requests_success=None,
    block_size=None, num_gpu_blocks=None, kv_capacity_tokens=None,
)


def test_it_reads_llamacpp_slots_and_token_counters(metrics_text):
    snap = parse_metrics(metrics_text("llamacpp-synthetic.txt"), "llamacpp", taken_at=100.0)

    assert snap == Snapshot(**{
        **NOTHING, "running": 4, "waiting": 2, "kv_usage": 0.4,
        "prompt_tokens": 4200, "generation_tokens": 9600, "taken_at": 100.0,
    })


def test_it_reads_sglang_including_cached_tokens_from_every_source(metrics_text):
    snap = parse_metrics(metrics_text("sglang-synthetic.txt"), "sglang", taken_at=100.0)

    assert snap == Snapshot(**{
        **NOTHING, "running": 6, "waiting": 5, "kv_usage": 0.125,
        "prefix_cache_queries": 8000, "prefix_cache_hits": 3000 + 1000,
        "prompt_tokens": 8000, "generation_tokens": 12000, "preemptions": 3,
        "requests_success": 40, "kv_capacity_tokens": 40960, "taken_at": 100.0,
    })


def test_it_reads_tgi_token_totals_from_histogram_sums(metrics_text):
    snap = parse_metrics(metrics_text("tgi-synthetic.txt"), "tgi", taken_at=100.0)

    assert snap == Snapshot(**{
        **NOTHING, "running": 7, "waiting": 3, "prompt_tokens": 2310,
        "generation_tokens": 3520, "requests_success": 11, "taken_at": 100.0,
    })


def test_it_reads_a_counter_exposed_without_total_or_type_line():
    text = "tgi_batch_current_size 1\ntgi_queue_size 0\ntgi_request_success 9\n"

    assert parse_metrics(text, "tgi", taken_at=0.0).requests_success == 9


def test_it_rejects_an_unknown_engine_kind():
    with pytest.raises(ValueError, match="unknown engine kind 'ollama'"):
        parse_metrics("x 1\n", "ollama", taken_at=0.0)
