"""A budget holds against requests that leave out max_tokens, split it between the two fields,
stream, and arrive at once through two gateway processes: each runs with the completion limit
its budget leaves, the engine is told that limit, and the whole burst charges at most the budget
plus the prompt of its largest request (the one part of the charge known only afterwards)."""

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import ApiKey, Budget, Replica, Tier
from tests.budgets.test_budgets_live import budget_counters
from tests.support.cast import MODEL
from tests.support.live_admission import nothing_held
from tests.support.polling import wait_for
from tests.support.processes import start_gateway

BUDGET = 3000
LOWERED = "x-gpuportal-max-tokens-lowered"


@pytest.fixture
def long_engine() -> Iterator[EngineSimProcess]:
    """An engine that, like vLLM, runs a chat that names no limit to the end of its context."""
    process = start_enginesim(model=MODEL, max_num_seqs=32,
                              extra_args=["--speed", "40", "--default-max-tokens", "4096"])
    yield process
    process.stop()


def bodies() -> list[tuple[str, dict]]:
    """Twenty requests, every one of which would run past the budget on its own."""
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "tell me everything"}], "ignore_eos": True}
    prompt = {"model": MODEL, "prompt": "Once upon a time", "ignore_eos": True}
    kinds = [
        ("chat", chat),  # no limit: to the end of the context
        ("chat", {**chat, "stream": True}),
        ("chat", {**chat, "max_tokens": 1, "max_completion_tokens": 2000}),  # the engine obeys 2000
        ("completions", {**prompt, "max_completion_tokens": 1, "max_tokens": 2000}),  # ... and here 2000
        ("completions", {**prompt, "max_tokens": 2000, "stream": True}),
    ]
    return [kinds[n % len(kinds)] for n in range(20)]


def send(url: str, secret: str, endpoint: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/{'chat/completions' if endpoint == 'chat' else 'completions'}",
                      content=json.dumps(body), timeout=120,
                      headers={"authorization": f"Bearer {secret}", "content-type": "application/json"})


def test_twenty_requests_at_once_through_two_gateways_charge_no_more_than_the_budget(
    gateway, live_db_url, cast, long_engine
):
    alice = cast["alice"]
    Tier.objects.filter(name="interactive").update(per_key_concurrency=20, max_queued_per_key=50)
    Tier.objects.get(name="interactive").save()  # bump the epoch
    Replica.objects.create(name="sim-long", base_url=long_engine.url, model=MODEL, max_num_seqs=32)
    # Before any request: both gateways load the key, budget and all, at its first use.
    budget = Budget.objects.create(key=ApiKey.objects.get(pk=alice.key_id), tokens=BUDGET, period=Budget.Period.DAY)
    second = start_gateway(live_db_url, name="gateway-2")
    try:
        urls = [gateway.url, second.url]
        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda n, job: send(urls[n % 2], alice.secret, *job),
                                    range(20), bodies()))
        wait_for(nothing_held, timeout=30, what="every lease back")
    finally:
        second.stop()

    served = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    assert served, [a.text for a in answers]
    assert {a.status_code for a in refused} <= {429}
    assert {a.json()["error"]["code"] for a in refused} <= {"budget_exceeded"}
    assert all(LOWERED in a.headers for a in served)  # every one asked more than 3,000 weighted tokens
    whole = [a for a in served if a.headers["content-type"].startswith("application/json")]
    # The engine ran exactly the lowered limit (ignore_eos): it was told it.
    assert all(a.json()["usage"]["completion_tokens"] == int(a.headers[LOWERED]) for a in whole)

    used, reserved = budget_counters(budget)
    assert reserved == pytest.approx(0, abs=1e-6)
    largest_prompt = max(a.json()["usage"]["prompt_tokens"] for a in whole) if whole else 64
    assert used <= BUDGET + largest_prompt
    assert used >= BUDGET * 0.5  # it was spent, not refused wholesale


def test_a_request_that_fits_is_told_nothing_and_one_that_does_not_fit_at_all_is_refused(
    gateway, cast, long_engine
):
    alice = cast["alice"]
    Replica.objects.create(name="sim-long", base_url=long_engine.url, model=MODEL, max_num_seqs=32)
    Budget.objects.create(key=ApiKey.objects.get(pk=alice.key_id), tokens=200, period=Budget.Period.DAY)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
    small = send(gateway.url, alice.secret, "chat", {**chat, "max_tokens": 20})
    assert small.status_code == 200, small.text
    assert LOWERED not in small.headers and small.json()["usage"]["completion_tokens"] == 20
    lowered = send(gateway.url, alice.secret, "chat", chat)
    assert lowered.status_code == 200, lowered.text
    assert lowered.json()["usage"]["completion_tokens"] == int(lowered.headers[LOWERED]) < 80
    refused = send(gateway.url, alice.secret, "chat", chat)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "budget_exceeded"


def test_a_whole_answer_says_what_its_budget_keeps_after_its_real_charge_and_a_stream_what_it_kept_before(
    gateway, cast, long_engine
):
    alice = cast["alice"]
    Replica.objects.create(name="sim-long", base_url=long_engine.url, model=MODEL, max_num_seqs=32)
    budget = Budget.objects.create(key=ApiKey.objects.get(pk=alice.key_id), tokens=2000, period=Budget.Period.DAY)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True, "max_tokens": 20}
    whole = send(gateway.url, alice.secret, "chat", chat)
    assert whole.status_code == 200, whole.text
    wait_for(nothing_held, timeout=30, what="the lease back")
    used, _ = budget_counters(budget)
    assert 40 <= used < 200  # 20 completion tokens at weight 2, and the prompt
    # Not the reservation (the request asked for up to 20 tokens of a prompt guessed from its size).
    assert int(whole.headers["x-gpuportal-budget-remaining"]) == round(2000 - used)
    assert "x-gpuportal-budget-before-request" not in whole.headers

    streamed = send(gateway.url, alice.secret, "chat", {**chat, "stream": True})
    assert streamed.status_code == 200, streamed.text
    assert int(streamed.headers["x-gpuportal-budget-before-request"]) == round(2000 - used)
    assert "x-gpuportal-budget-remaining" not in streamed.headers
