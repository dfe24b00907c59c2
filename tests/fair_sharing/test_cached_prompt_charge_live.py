"""A prompt the engine found in its prefix cache is charged less, end to end: enginesim reports
the cached tokens as vLLM does with --enable-prompt-tokens-details, the gateway charges them at
GP_FAIRSHARE_WEIGHT_CACHED_PROMPT in fair share and budgets alike, and a budget counted again
from the usage records comes to the same figure."""

import json
from collections.abc import Callable, Iterator
from typing import TypeVar

import httpx
import pytest
import redis
from django.conf import settings

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.accounting import usage
from fairness.models import ApiKey, Budget, Replica, UsageRecord
from fairness.scheduling import fair_share
from fairness.store.redis_clients import redis_sync
from fairness.telemetry import budget_status
from tests.support.accounts import association, live_usage
from tests.support.cast import MODEL
from tests.support.live_admission import nothing_held
from tests.support.polling import wait_for
from tests.support.redis_db import TEST_REDIS_URL

T = TypeVar("T")

# About 400 tokens, 25 of enginesim's 16-token blocks: most of it is cached the second time.
SHARED = "Our group shares one card, so every answer waits its fair turn. " * 25


@pytest.fixture
def caching_engine() -> Iterator[EngineSimProcess]:
    process = start_enginesim(model=MODEL, max_num_seqs=8,
                              extra_args=["--speed", "20", "--enable-prompt-tokens-details"])
    yield process
    process.stop()


@pytest.fixture
def on_caching_engine(gateway, caching_engine):
    return Replica.objects.create(name="sim-cache", base_url=caching_engine.url, model=MODEL, max_num_seqs=8)


def ask(url: str, member, question: str, stream: bool = False) -> httpx.Response:
    body = {"model": MODEL, "max_tokens": 12, "ignore_eos": True, "stream": stream,
            "messages": [{"role": "system", "content": SHARED}, {"role": "user", "content": question}]}
    if stream:  # asked for, so the answer shows the counts the gateway read
        body["stream_options"] = {"include_usage": True}
    answer = httpx.post(url + "/v1/chat/completions", json=body,
                        headers={"authorization": f"Bearer {member.secret}"}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer


def counts(answer: httpx.Response) -> tuple[int, int, int]:
    """(prompt, completion, cached) as the engine reported them to the client."""
    if answer.headers["content-type"].startswith("text/event-stream"):
        events = [json.loads(line[6:]) for line in answer.text.splitlines()
                  if line.startswith("data: {") and '"usage"' in line]
        counted = [e["usage"] for e in events if e.get("usage")][-1]
    else:
        counted = answer.json()["usage"]
    return counted["prompt_tokens"], counted["completion_tokens"], counted["prompt_tokens_details"]["cached_tokens"]


def charge(prompt: int, completion: int, cached: int) -> float:
    return fair_share.weighted_tokens(prompt, completion, settings.GP_FAIRSHARE_WEIGHT_PROMPT,
                                      settings.GP_FAIRSHARE_WEIGHT_COMPLETION, cached=cached,
                                      w_cached=settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT)


def written(found: Callable[[], T], what: str) -> T:
    """`found` once the flush task's unit has written the rows it looks for."""

    def flushed() -> T:
        usage.flush(redis_sync())
        return found()

    return wait_for(flushed, timeout=10, what=what)


def charged_so_far(member) -> float:
    wait_for(nothing_held, timeout=5, what="every lease back (the charge rides on the release)")
    return live_usage()[0].get(association(member), 0.0)


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_the_engine_had_cached_is_charged_less(gateway, cast, on_caching_engine, stream):
    alice = cast["alice"]
    cold = counts(ask(gateway.url, alice, "What is fair share?", stream))
    first = charged_so_far(alice)
    warm_answer = ask(gateway.url, alice, "What is fair share?", stream)
    warm, warm_id = counts(warm_answer), warm_answer.headers["x-request-id"]
    second = charged_so_far(alice) - first

    assert cold[2] == 0 and warm[2] >= cold[0] - 32  # all but the last block or two came from the cache
    # rel 1e-4: the first charge decays with the fair-share half-life between the two reads (a few
    # hundred-thousandths of it over a second), which the difference `second` takes in too.
    assert first == pytest.approx(charge(*cold), rel=1e-4)
    assert second == pytest.approx(charge(*warm), rel=1e-4)
    assert second < 0.3 * first  # the same request, its prefill skipped
    record = written(lambda: UsageRecord.objects.filter(request_id=warm_id).first(), "the warm request's row")
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == warm


def test_a_budget_counts_the_cached_prompt_as_charged_live_and_again_from_the_records(
    gateway, cast, on_caching_engine
):
    alice = cast["alice"]
    budget = Budget.objects.create(key=ApiKey.objects.get(pk=alice.key_id), tokens=10**6, period=Budget.Period.MONTH)
    answers: list[httpx.Response] = []

    def budget_seen() -> bool:
        answers.append(ask(gateway.url, alice, "Warm up."))
        return "x-gpuportal-budget-remaining" in answers[-1].headers

    wait_for(budget_seen, timeout=10, what="the budget to reach the gateway")
    answers += [ask(gateway.url, alice, f"Question {n}?", stream=n % 2 == 1) for n in range(4)]
    reported = [counts(a) for a in answers]
    assert sum(cached for _, _, cached in reported) > 0
    expected = sum(charge(*c) for c in reported)
    live = charged_so_far(alice)
    # rel 1e-4: fair-share usage decays with its half-life (a week: about a millionth every 0.9 s)
    # between the charges and this read. The budget below does not decay.
    assert live == pytest.approx(expected, rel=1e-4)
    assert budget_status.status_of([budget])[0].used == pytest.approx(expected, rel=1e-6)

    ids = [a.headers["x-request-id"] for a in answers]
    written(lambda: UsageRecord.objects.filter(request_id__in=ids).count() == len(ids), "the usage rows")
    redis.Redis.from_url(TEST_REDIS_URL).flushdb()  # as a Redis without persistence restarts
    assert budget_status.restore_if_lost() is True
    assert budget_status.status_of([budget])[0].used == pytest.approx(expected, rel=1e-6)
