"""Where each inference engine keeps its load and throughput figures in its /metrics text.

Each field lists candidate names, best first: the first name with any series wins, so an
engine that still emits a deprecated alias beside the current name is not counted twice.
Counters are written without `_total`, as prometheus_client names their family; the parser
looks for `<name>_total` and then `<name>`.
"""

from dataclasses import dataclass

Names = tuple[str, ...]


@dataclass(frozen=True)
class EngineMetrics:
    running: Names
    waiting: Names
    kv_usage: Names = ()
    prompt_tokens: Names = ()
    generation_tokens: Names = ()
    prefix_cache_queries: Names = ()
    prefix_cache_hits: Names = ()
    preemptions: Names = ()
    requests_success: Names = ()
    # Gauges labelled by `reason`; only reason="capacity" means the engine is out of KV room.
    waiting_by_reason: Names = ()
    # An info gauge whose `block_size` and `num_gpu_blocks` labels give KV capacity.
    cache_config_info: Names = ()
    # A gauge that states KV capacity in tokens outright.
    kv_capacity_tokens: Names = ()


VLLM = EngineMetrics(
    running=("vllm:num_requests_running",),
    waiting=("vllm:num_requests_waiting",),
    # `gpu_cache_usage_perc` and the `gpu_prefix_cache_*` counters are the names before the
    # rename; releases in between emit both, hence current first.
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    prompt_tokens=("vllm:prompt_tokens",),
    generation_tokens=("vllm:generation_tokens",),
    prefix_cache_queries=("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    prefix_cache_hits=("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    preemptions=("vllm:num_preemptions",),
    requests_success=("vllm:request_success",),
    waiting_by_reason=("vllm:num_requests_waiting_by_reason",),
    cache_config_info=("vllm:cache_config_info",),
)

LLAMACPP = EngineMetrics(
    running=("llamacpp:requests_processing",),
    waiting=("llamacpp:requests_deferred",),
    kv_usage=("llamacpp:kv_cache_usage_ratio",),
    prompt_tokens=("llamacpp:prompt_tokens",),
    generation_tokens=("llamacpp:tokens_predicted",),
)

SGLANG = EngineMetrics(
    running=("sglang:num_running_reqs",),
    waiting=("sglang:num_queue_reqs",),
    kv_usage=("sglang:token_usage",),
    prompt_tokens=("sglang:prompt_tokens",),
    generation_tokens=("sglang:generation_tokens",),
    # SGLang's `cache_hit_rate` gauge covers only recent batches; its counters give the
    # same Δhits/Δqueries as vLLM's: cached prompt tokens over all prompt tokens.
    prefix_cache_queries=("sglang:prompt_tokens",),
    prefix_cache_hits=("sglang:cached_tokens",),
    preemptions=("sglang:num_retracted_requests",),
    requests_success=("sglang:num_requests",),
    kv_capacity_tokens=("sglang:max_total_num_tokens",),
)

TGI = EngineMetrics(
    running=("tgi_batch_current_size",),
    waiting=("tgi_queue_size",),
    # TGI has no token counters; its per-request histograms' sums only ever grow. Input
    # length is recorded on arrival, generated tokens when a request finishes.
    prompt_tokens=("tgi_request_input_length_sum",),
    generation_tokens=("tgi_request_generated_tokens_sum",),
    requests_success=("tgi_request_success",),
)

ENGINES: dict[str, EngineMetrics] = {
    "vllm": VLLM,
    "llamacpp": LLAMACPP,
    "sglang": SGLANG,
    "tgi": TGI,
}
