"""The whole path against real vLLM: the official SDK, through the gateway, to the CPU build."""

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from enginesim.process import start_enginesim
from fairness.telemetry.metrics_parser import parse_metrics
from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.support.polling import wait_for
from tests.support.usage_records import recorded

MESSAGES = [{"role": "user", "content": "Tell me about the weather in spring."}]



def server_named(vllm_pair, name):
    fcfs, priority = vllm_pair
    return fcfs if name == "vllm-fcfs" else priority


def test_models_lists_the_tiny_model(cast, engine_client):
    assert [m.id for m in engine_client(cast["alice"]).models.list().data] == [TINY]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_through_the_gateway_is_answered_and_counted(cast, engine_client, stream):
    client = engine_client(cast["alice"])
    raw = client.chat.completions.with_raw_response.create(
        model=TINY, messages=MESSAGES, max_tokens=24, stream=stream, extra_body={"ignore_eos": True}
    )
    result = raw.parse()
    if stream:
        chunks = list(result)
        assert all(c.choices for c in chunks)  # the gateway's usage chunk is not shown to the client
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
    else:
        text = result.choices[0].message.content
        assert result.usage.completion_tokens == 24
    assert text
    record = recorded(raw.headers["x-request-id"])
    assert record.completion_tokens == 24 and record.prompt_tokens > 5
    assert record.replica == raw.headers["x-gpuportal-replica"]


@pytest.mark.parametrize("stream", [False, True])
def test_completions_through_the_gateway_are_answered_and_counted(cast, engine_client, stream):
    client = engine_client(cast["carol"])
    raw = client.completions.with_raw_response.create(
        model=TINY, prompt="The meeting is about", max_tokens=10, stream=stream, extra_body={"ignore_eos": True}
    )
    result = raw.parse()
    text = "".join(c.choices[0].text for c in result) if stream else result.choices[0].text
    assert text
    record = recorded(raw.headers["x-request-id"])
    assert (record.completion_tokens, record.stream) == (10, stream)
    assert record.prompt_tokens > 0


def test_an_over_long_prompt_is_the_engines_400_not_a_gateway_error(cast, gateway, engine_replicas):
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": TINY, "messages": [{"role": "user", "content": "lorem ipsum " * 1500}]},
        headers={"authorization": f"Bearer {cast['alice'].secret}"},
        timeout=120,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert "maximum context length" in error["message"]
    assert set(error) == {"message", "type", "param", "code"}


def test_leaving_mid_stream_frees_the_real_engine(cast, gateway, engine_replicas, vllm_pair):
    body = {"model": TINY, "messages": MESSAGES, "max_tokens": 900, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body,
                      headers={"authorization": f"Bearer {cast['bob'].secret}"}, timeout=120) as response:
        assert response.status_code == 200
        server = server_named(vllm_pair, response.headers["x-gpuportal-replica"])
        lines = response.iter_lines()
        for _ in range(3):
            assert next(line for line in lines if line.startswith("data: {"))
    started = time.monotonic()

    def engine_idle():
        snapshot = parse_metrics(server.metrics_text(timeout=30), "vllm", time.time())
        return snapshot.running == 0 and snapshot.waiting == 0

    wait_for(engine_idle, timeout=30, interval=0.1, what="vllm:num_requests_running to return to 0")
    generated = parse_metrics(server.metrics_text(), "vllm", time.time()).generation_tokens
    assert time.monotonic() - started < 30 and generated is not None


def families(text: str) -> dict[str, set[str]]:
    """Metric family name -> the label names its samples carry."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                found.setdefault(sample.name, set()).update(sample.labels)
    return found


def test_enginesim_speaks_the_real_engines_metric_names(vllm_pair):
    real_text = vllm_pair[0].metrics_text(timeout=30)
    with start_enginesim(model=TINY, max_num_seqs=8, extra_args=["--speed", "50"]) as sim:
        httpx.post(sim.url + "/v1/completions", json={"model": TINY, "prompt": "a b c d " * 20, "max_tokens": 4})
        httpx.post(sim.url + "/v1/completions", json={"model": TINY, "prompt": "a b c d " * 20, "max_tokens": 4})
        sim_text = sim.metrics_text()

    real, simulated = families(real_text), families(sim_text)
    drifted = {name for name in simulated if name.startswith("vllm:") and name not in real}
    assert not drifted, f"enginesim exposes names the real engine does not: {sorted(drifted)}"
    for name, labels in simulated.items():
        if name.startswith("vllm:"):
            assert labels <= real[name], f"{name}: enginesim labels {labels - real[name]} unknown to vLLM"

    # The gateway's parser reads the same fields from both.
    real_snapshot = parse_metrics(real_text, "vllm", 0.0, model=TINY)
    sim_snapshot = parse_metrics(sim_text, "vllm", 0.0, model=TINY)
    present = lambda snap: {f for f, v in vars(snap).items() if v is not None}  # noqa: E731
    assert present(real_snapshot) == present(sim_snapshot)
    for snapshot in (real_snapshot, sim_snapshot):
        assert snapshot.prefix_cache_queries is not None and snapshot.generation_tokens is not None
        assert snapshot.kv_capacity_tokens and 0.0 <= snapshot.kv_usage <= 1.0


def test_a_stream_cut_after_its_first_token_is_charged_the_prompt_vllm_counted(cast, gateway, engine_replicas):
    headers = {"authorization": f"Bearer {cast['alice'].secret}"}
    messages = [{"role": "user", "content": "The weather in spring turns from rain to sun. " * 30}]
    whole = httpx.post(gateway.url + "/v1/chat/completions", headers=headers, timeout=120,
                       json={"model": TINY, "messages": messages, "max_tokens": 1})
    assert whole.status_code == 200
    prompt = whole.json()["usage"]["prompt_tokens"]  # vLLM's own count, from a finished request
    assert 100 < prompt < 700
    body = {"model": TINY, "messages": messages, "max_tokens": 1024 - prompt - 8, "ignore_eos": True, "stream": True}
    # The tiny model writes the whole answer in under a second, so on a loaded machine the cut can
    # reach the gateway after the answer's end: that answer was whole and is charged as one.
    # A few tries make sure one is cut; every try must be charged for what it was.
    statuses = []
    for _ in range(5):
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers,
                          timeout=120) as response:
            assert response.status_code == 200
            request_id = response.headers["x-request-id"]
            assert next(line for line in response.iter_lines() if '"content"' in line)
        record = recorded(request_id)
        statuses.append(record.status)
        if record.status == 200:
            assert (record.prompt_tokens, record.completion_tokens) == (prompt, body["max_tokens"])
            assert record.prompt_count_source == "engine"
            continue
        assert record.status == 499 and record.prompt_count_source == "tokenize"
        assert abs(record.prompt_tokens - prompt) <= 0.1 * prompt, (record.prompt_tokens, prompt)
        assert 0 < record.completion_tokens < body["max_tokens"]
        return
    pytest.fail(f"no stream of five was cut before its end: {statuses}")
