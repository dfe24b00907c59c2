"""A whole answer abandoned before it came is charged the tokens its engine decoded meanwhile: the
engine's pace and time to a first token as this gateway process measured them on its completed
requests, over the time the request held its slot, at most its completion limit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.accounting import usage
from fairness.gateway.abandoned_work import (
    DEFAULT_FIRST_TOKEN_SECONDS,
    DEFAULT_TOKENS_PER_SECOND,
    DecodeCalibration,
)
from fairness.models import Replica, UsageRecord
from fairness.store.redis_clients import redis_sync
from tests.support.cast import MODEL, Member
from tests.support.gateway_process import GatewayProcess
from tests.support.polling import wait_for
from tests.support.processes import start_gateway

# The charged count against what the engine generated for the request: the gateway's clock and the
# engine's start and stop a few decode steps apart, and the engine's pace varies a little with its
# event loop; 15% (at least ten tokens) takes both.
TOLERANCE = 0.15


# The arithmetic.


def test_before_any_measurement_it_charges_the_stated_defaults():
    pace = DecodeCalibration()
    assert pace.tokens_per_second == DEFAULT_TOKENS_PER_SECOND
    assert pace.first_token_seconds == DEFAULT_FIRST_TOKEN_SECONDS
    assert pace.estimate(3.0, limit=1000) == round(DEFAULT_TOKENS_PER_SECOND * (3.0 - DEFAULT_FIRST_TOKEN_SECONDS))


def test_a_stream_measures_its_first_token_and_the_pace_after_it():
    pace = DecodeCalibration()
    pace.observe(200, seconds=4.5, first_token_seconds=0.5)  # 200 tokens in the 4 s after the first
    assert pace.first_token_seconds == 0.5 and pace.tokens_per_second == 50.0
    assert pace.estimate(2.5, limit=1000) == 100  # 2 s of decoding at 50 a second


def test_the_estimate_is_never_more_than_the_limit_nor_less_than_nothing():
    pace = DecodeCalibration()
    pace.observe(200, seconds=4.5, first_token_seconds=0.5)
    assert pace.estimate(60.0, limit=300) == 300
    assert pace.estimate(0.2, limit=300) == 0  # gone before its first token


def test_a_whole_answer_measures_the_pace_after_the_measured_first_token():
    pace = DecodeCalibration(memory=1.0)
    pace.observe(100, seconds=2.5, first_token_seconds=0.5)  # 50 a second
    pace.observe(100, seconds=1.5)  # came whole: decoded in the 1 s after the first token's 0.5 s
    assert pace.first_token_seconds == 0.5
    assert pace.tokens_per_second == pytest.approx(200 / 3)  # sums: 200 tokens in 3 s


def test_recent_requests_weigh_more_as_the_engines_load_changes():
    pace = DecodeCalibration(memory=0.5)
    pace.observe(100, seconds=1.0, first_token_seconds=0.0)  # alone on the engine: 100 a second
    for _ in range(10):
        pace.observe(20, seconds=1.0, first_token_seconds=0.0)  # in a full batch: 20 a second
    assert pace.tokens_per_second == pytest.approx(20, rel=0.01)


def test_answers_too_short_or_timeless_to_measure_a_pace_are_ignored():
    short = DecodeCalibration()
    short.observe(1, seconds=0.001, first_token_seconds=0.0005)  # one token: the engine's overheads
    assert short.tokens_per_second == DEFAULT_TOKENS_PER_SECOND and short.first_token_seconds == 0.0005
    quick = DecodeCalibration()
    quick.observe(50, seconds=0.5)  # whole, and quicker than the time to a first token it knows
    assert quick.tokens_per_second == DEFAULT_TOKENS_PER_SECOND


# Through a gateway and a simulated engine of a fixed decode speed.


@pytest.fixture
def steady(cast: dict[str, Member]) -> Iterator[EngineSimProcess]:
    """One replica decoding about a hundred tokens a second (10 ms steps at --speed 1)."""
    with start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "1"]) as engine:
        Replica.objects.create(name="steady", base_url=engine.url, model=MODEL, max_num_seqs=8)
        yield engine


@pytest.fixture
def fresh_gateway(live_db_url: str, steady: EngineSimProcess) -> Iterator[GatewayProcess]:
    """A gateway of its own, so its measurements are of this engine alone."""
    process = start_gateway(live_db_url, name="decode-pace")
    yield process
    process.stop()


def chat(max_tokens: int, **fields: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Tell a long story."}],
            "max_tokens": max_tokens, "ignore_eos": True, **fields}


def test_a_whole_answer_abandoned_mid_decode_is_charged_about_what_the_engine_decoded(
    fresh_gateway: GatewayProcess, steady: EngineSimProcess, cast: dict[str, Member]
):
    url = fresh_gateway.url + "/v1/chat/completions"
    for _ in range(3):  # completed streams: this gateway measures the engine
        with httpx.stream("POST", url, json=chat(60, stream=True), timeout=30,
                          headers={"authorization": f"Bearer {cast['alice'].secret}"}) as response:
            assert response.status_code == 200
            assert any("[DONE]" in line for line in response.iter_lines())
    before = steady.stats()["generation_tokens"]
    with contextlib.suppress(httpx.ReadTimeout):  # the client gives up, about 150 tokens in
        httpx.post(url, json=chat(2000), headers={"authorization": f"Bearer {cast['bob'].secret}"}, timeout=1.5)
    wait_for(lambda: steady.stats()["running"] + steady.stats()["waiting"] == 0, timeout=5,
             what="the engine to drop the request")
    decoded = steady.stats()["generation_tokens"] - before

    def bobs() -> UsageRecord | None:
        usage.flush(redis_sync())
        return UsageRecord.objects.filter(key_id=cast["bob"].key_id).first()

    record = wait_for(bobs, what="bob's usage record")
    assert record.status == 499 and record.completion_count_source == "estimate"
    assert 100 < decoded < 2000  # it left mid-decode
    assert abs(record.completion_tokens - decoded) <= max(10, TOLERANCE * decoded), (record.completion_tokens, decoded)
