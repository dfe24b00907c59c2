"""/metrics under vLLM V1's names, and the prefix cache as the metrics report it."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from enginesim.process import EngineSimProcess
from tests.support.enginesim import MODEL, chat_body, launch, stats, wait_until

EXPECTED_SAMPLES = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:num_preemptions_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:request_queue_time_seconds_bucket",
    "vllm:cache_config_info",
}


def scrape(sim: EngineSimProcess) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] from a strict parse of /metrics."""
    response = httpx.get(f"{sim.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str,
          **labels: str) -> float:
    matching = [v for lab, v in samples[name] if labels.items() <= lab.items()]
    assert len(matching) == 1, (name, labels, samples.get(name))
    return matching[0]


def test_metrics_parse_and_carry_vllms_names_and_labels(sim: EngineSimProcess) -> None:
    httpx.post(f"{sim.url}/v1/chat/completions", json=chat_body(max_tokens=3, ignore_eos=True))
    samples = scrape(sim)
    assert samples.keys() >= EXPECTED_SAMPLES
    for name in EXPECTED_SAMPLES - {"vllm:cache_config_info"}:
        for labels, _ in samples[name]:
            assert labels["model_name"] == MODEL and labels["engine"] == "0", name
    assert {lab["finished_reason"] for lab, _ in samples["vllm:request_success_total"]} >= {
        "stop", "length", "abort"}
    assert value(samples, "vllm:request_success_total", finished_reason="length") >= 1
    assert value(samples, "vllm:generation_tokens_total") >= 3
    assert value(samples, "vllm:time_to_first_token_seconds_count") >= 1
    [(info, one)] = samples["vllm:cache_config_info"]
    assert one == 1
    assert info["block_size"] == "16" and info["enable_prefix_caching"] == "True"
    assert int(info["num_gpu_blocks"]) == 8 * 4096 // 16
    assert info["engine"] == "0"


def test_a_repeated_prompt_hits_the_prefix_cache(sim: EngineSimProcess) -> None:
    prompt = "The quick brown fox jumps over the lazy dog. " * 40  # 1800 bytes: 450 tokens
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
    before = scrape(sim)
    httpx.post(f"{sim.url}/v1/completions", json=body)
    middle = scrape(sim)
    httpx.post(f"{sim.url}/v1/completions", json=body)
    after = scrape(sim)

    def delta(a: dict, b: dict, name: str) -> float:  # type: ignore[type-arg]
        return value(b, name) - value(a, name)

    assert delta(before, middle, "vllm:prefix_cache_queries_total") == 450
    assert delta(before, middle, "vllm:prefix_cache_hits_total") == 0
    assert delta(middle, after, "vllm:prefix_cache_queries_total") == 450
    assert delta(middle, after, "vllm:prefix_cache_hits_total") == 448  # 28 full blocks
    assert delta(before, after, "vllm:prompt_tokens_total") == 900


def test_a_growing_conversation_reuses_the_previous_turn(sim: EngineSimProcess) -> None:
    history = [{"role": "system", "content": "You are terse. " * 30},
               {"role": "user", "content": "Explain batching. " * 20}]
    url = f"{sim.url}/v1/chat/completions"
    first = httpx.post(url, json={"model": MODEL, "messages": history, "max_tokens": 4}).json()
    history += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                {"role": "user", "content": "And then?"}]
    hits_before = stats(sim)["prefix_cache_hits"]
    httpx.post(url, json={"model": MODEL, "messages": history, "max_tokens": 4})
    hits = stats(sim)["prefix_cache_hits"] - hits_before
    assert hits >= first["usage"]["prompt_tokens"] // 16 * 16


def test_without_prefix_caching_nothing_hits() -> None:
    with launch(2, "--speed", "10", "--no-prefix-caching") as sim:
        body = {"model": MODEL, "prompt": "repeat me " * 100, "max_tokens": 1}
        httpx.post(f"{sim.url}/v1/completions", json=body)
        httpx.post(f"{sim.url}/v1/completions", json=body)
        samples = scrape(sim)
        assert value(samples, "vllm:prefix_cache_hits_total") == 0
        assert value(samples, "vllm:prefix_cache_queries_total") > 0
        [(info, _)] = samples["vllm:cache_config_info"]
        assert info["enable_prefix_caching"] == "False"


def test_a_warm_prefix_cuts_time_to_first_token() -> None:
    # 6,000 uncached tokens at 8,000 tokens/s is 0.75 s of prefill; cached, one step.
    with launch(2, "--max-model-len", "8192") as sim, httpx.Client(timeout=30) as client:
        body = {"model": MODEL, "prompt": "history " * 3000, "max_tokens": 2, "stream": True}

        def ttft() -> float:
            start = time.monotonic()
            with client.stream("POST", f"{sim.url}/v1/completions", json=body) as response:
                for _ in response.iter_lines():
                    elapsed = time.monotonic() - start
                    break
            return elapsed

        cold, warm = ttft(), ttft()
        assert 0.7 < cold < 2.0
        assert warm < 0.4  # one decode step; the rest is HTTP and the host


def test_kv_usage_is_a_fraction_of_blocks_in_use() -> None:
    with launch(2, "--max-model-len", "512", "--num-gpu-blocks", "64") as sim:
        with httpx.Client(timeout=30) as client:
            # 1,024 bytes = 256 tokens = 16 blocks of the 64.
            body = {"model": MODEL, "prompt": "x" * 1024, "max_tokens": 200, "ignore_eos": True,
                    "stream": True}
            with client.stream("POST", f"{sim.url}/v1/completions", json=body) as response:
                lines = response.iter_lines()  # keep a reference: dropping it closes the stream
                next(lines)
                usage = value(scrape(sim), "vllm:kv_cache_usage_perc")
                assert 16 / 64 <= usage <= 30 / 64
        wait_until(lambda: stats(sim)["running"] == 0, what="the aborted stream to leave")
        assert value(scrape(sim), "vllm:kv_cache_usage_perc") == 0
