"""vLLM specifics: old and new names, data-parallel engines, the model filter, KV capacity."""

import pytest

from fairness.telemetry.metrics_parser import MetricsParseError, parse_metrics


def test_it_reads_legacy_gpu_cache_and_gpu_prefix_cache_names(metrics_text):
    snap = parse_metrics(metrics_text("vllm-legacy-names-synthetic.txt"), "vllm", taken_at=5.0)

    assert (snap.running, snap.waiting, snap.waiting_capacity) == (3, 2, None)
    assert snap.kv_usage == 0.25
    assert (snap.prefix_cache_queries, snap.prefix_cache_hits) == (1000, 400)
    assert (snap.prompt_tokens, snap.generation_tokens) == (1500, 5000)
    assert (snap.preemptions, snap.requests_success) == (0, 10 + 2 + 1)
    assert (snap.block_size, snap.num_gpu_blocks, snap.kv_capacity_tokens) == (16, 2048, 32768)


def test_it_sums_data_parallel_engines_and_averages_their_kv_usage(metrics_text):
    snap = parse_metrics(metrics_text("vllm-dp2-with-aliases-synthetic.txt"), "vllm", taken_at=5.0)

    assert (snap.running, snap.waiting) == (3 + 4, 2 + 3)
    assert snap.waiting_capacity == 1 + 2  # the "deferred" series are not capacity
    assert snap.kv_usage == pytest.approx((0.25 + 0.75) / 2)
    # The file also carries the deprecated gpu_prefix_cache_* aliases; they are not added in.
    assert (snap.prefix_cache_queries, snap.prefix_cache_hits) == (3000, 1200)
    assert (snap.prompt_tokens, snap.generation_tokens) == (4500, 15000)
    assert snap.requests_success == (10 + 2 + 1) + (20 + 2 + 1)
    assert (snap.block_size, snap.num_gpu_blocks) == (16, 2 * 2048)
    assert snap.kv_capacity_tokens == 16 * 4096


def test_it_prefers_current_names_when_an_engine_emits_both():
    text = """
vllm:num_requests_running{engine="0",model_name="m"} 1
vllm:num_requests_waiting{engine="0",model_name="m"} 0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 7
"""
    snap = parse_metrics(text, "vllm", taken_at=0.0)

    assert (snap.kv_usage, snap.prefix_cache_queries) == (0.5, 100)


TWO_MODELS = """
vllm:num_requests_running{engine="0",model_name="tiny"} 2
vllm:num_requests_running{engine="0",model_name="big"} 5
vllm:num_requests_waiting{engine="0",model_name="tiny"} 1
vllm:num_requests_waiting{engine="0",model_name="big"} 9
vllm:generation_tokens_total{engine="0",model_name="tiny"} 300
vllm:generation_tokens_total{engine="0",model_name="big"} 7000
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1
"""


def test_model_filter_counts_only_that_models_series():
    snap = parse_metrics(TWO_MODELS, "vllm", taken_at=0.0, model="tiny")

    assert (snap.running, snap.waiting, snap.generation_tokens) == (2, 1, 300)
    # Series without a model_name label belong to the whole server.
    assert snap.kv_capacity_tokens == 1600


def test_without_a_model_filter_every_model_is_counted():
    snap = parse_metrics(TWO_MODELS, "vllm", taken_at=0.0)

    assert (snap.running, snap.waiting, snap.generation_tokens) == (7, 10, 7300)


def test_a_model_the_engine_does_not_serve_is_an_error_not_an_idle_replica():
    with pytest.raises(MetricsParseError, match="for model 'ghost'"):
        parse_metrics(TWO_MODELS, "vllm", taken_at=0.0, model="ghost")


def test_kv_capacity_is_unknown_while_the_engine_is_still_profiling():
    text = """
vllm:num_requests_running{engine="0",model_name="m"} 0
vllm:num_requests_waiting{engine="0",model_name="m"} 0
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="None"} 1
"""
    snap = parse_metrics(text, "vllm", taken_at=0.0)

    assert (snap.block_size, snap.num_gpu_blocks, snap.kv_capacity_tokens) == (16, None, None)


def test_a_nan_sample_reads_as_missing():
    text = """
vllm:num_requests_running{engine="0",model_name="m"} 0
vllm:num_requests_waiting{engine="0",model_name="m"} 0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN
"""
    assert parse_metrics(text, "vllm", taken_at=0.0).kv_usage is None
