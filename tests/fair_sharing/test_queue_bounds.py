"""The queue's bounds beyond one key's, through live gateways: a batch key firing hundreds of long
requests gets 429 for the excess at once (never 503: it holds no connection waiting), and an
interactive key still gets through."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import Replica, Tier
from tests.support.cast import MODEL, Member
from tests.support.live_admission import admission_stats, chat_body, drop, key_stats, nothing_held, send, wait_async
from tests.support.polling import wait_for
from tests.support.processes import start_gateway

# Long requests from one batch key, as the attack on the queue sent them: before the tier's bound,
# 5 ran and 1,019 queued, which took the gateway to its 1,024 requests served (6 got 503, as did an
# interactive key's chat).
ATTACK = 1030
WAVE = 50


@pytest.fixture
def slow_engine() -> Iterator[EngineSimProcess]:
    """A quarter of real time: a 4,000-token answer takes about 160 s, so nothing of the attack ends
    meanwhile, even when a busy machine takes a minute to send it (at real time, 40 s, a loaded
    run saw some of it answered 200)."""
    process = start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "0.25"])
    yield process
    process.stop()


@pytest.fixture
def on_slow_engine(gateway, slow_engine: EngineSimProcess) -> Replica:
    return Replica.objects.create(name="slow", base_url=slow_engine.url, model=MODEL, max_num_seqs=8)


async def until_answered(tasks: list[asyncio.Task], count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(task.done() for task in tasks) < count:
        if time.monotonic() > deadline:
            answered = sum(task.done() for task in tasks)
            stats = await asyncio.to_thread(admission_stats)
            raise AssertionError(f"{answered} of {len(tasks)} answered, not {count}: {stats}")
        await asyncio.sleep(0.05)


def settled(member: Member, tasks: list[asyncio.Task]) -> bool:
    """Every request sent is running, queued or answered."""
    held = key_stats(member)
    return held["in_flight"] + held["queued"] + sum(task.done() for task in tasks) == len(tasks)


async def attack(
    url: str, carol: Member, alice: Member, count: int
) -> tuple[list[httpx.Response], dict, httpx.Response]:
    """carol fires `count` long requests, in waves of WAVE (one address opening hundreds of
    connections at the same instant is the connection limits' business, not the queue's); once every
    one is queued, running or answered, alice asks something short. Returns the answers carol got
    by then, how many of hers were running and queued then, and alice's answer."""
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        long = chat_body(carol, max_tokens=4000)
        tasks: list[asyncio.Task] = []
        try:
            while len(tasks) < count:
                wave = min(WAVE, count - len(tasks))
                tasks += [asyncio.create_task(send(client, url, carol, long)) for _ in range(wave)]
                sent = list(tasks)
                await wait_async(lambda: settled(carol, sent), timeout=60)  # noqa: B023 -- awaited here
            held = await asyncio.to_thread(key_stats, carol)
            await until_answered(tasks, count - held["in_flight"] - held["queued"])
            answered = [task.result() for task in tasks if task.done()]
            chat = await send(client, url, alice, chat_body(alice, max_tokens=4))
            return answered, held, chat
        finally:
            await drop(tasks)


def assert_refused_as_queue_full(answers: list[httpx.Response], words: str) -> None:
    assert answers, "nothing was refused"
    statuses = {response.status_code for response in answers}
    assert statuses == {429}, statuses  # no 503, and nothing of the attack served meanwhile
    for response in answers:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert (error["type"], error["code"]) == ("rate_limit_error", "queue_full")
        assert words in error["message"] and "_" not in error["message"]
        assert 1 <= int(response.headers["retry-after"]) <= 30


def test_one_batch_key_queues_no_more_than_its_tiers_bound_and_chats_still_run(gateway, cast, on_slow_engine):
    carol, alice = cast["carol"], cast["alice"]
    bound = Tier.objects.get(name="batch").max_queued  # as seeded
    assert bound is not None and bound + 8 < ATTACK

    refused, held, chat = asyncio.run(attack(gateway.url, carol, alice, ATTACK))

    assert_refused_as_queue_full(refused, f"batch tier already has {bound} requests waiting")
    assert chat.status_code == 200, chat.text
    assert held["queued"] == bound and 1 <= held["in_flight"] <= 8
    assert len(refused) == ATTACK - bound - held["in_flight"]
    wait_for_nothing_held()


def test_the_deployments_total_bound_refuses_past_it_for_every_tier(
    live_db_url, gateway, cast, on_slow_engine
):
    bounded = start_gateway(live_db_url, name="total-bound", GP_MAX_QUEUED_TOTAL="30")
    try:
        carol, alice = cast["carol"], cast["alice"]
        refused, held, chat = asyncio.run(attack(bounded.url, carol, alice, 80))
        assert held["queued"] == 30 and len(refused) == 80 - 30 - held["in_flight"]
        assert_refused_as_queue_full(refused, "gateway already has 30 requests waiting")
        # The client hung up: its tickets leave as the gateway sees each connection go.
        wait_for(lambda: key_stats(carol)["queued"] == 0, timeout=30, what="carol's tickets to leave")
        # Past the bound too: a whole answer gives back the slot it borrowed, so it waits for no one.
        assert chat.status_code == 200, chat.text
    finally:
        bounded.stop()
    wait_for_nothing_held()


def wait_for_nothing_held() -> None:
    wait_for(nothing_held, timeout=30, what="every lease and ticket given back",
             evidence=lambda: str(admission_stats()))
