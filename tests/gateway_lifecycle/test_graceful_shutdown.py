"""A gateway told to stop (SIGTERM, as in a rolling restart) finishes its streams, refuses new
connections, gives every slot back at once rather than after the lease TTL, and cuts off what
outlives the grace period."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis
from django.contrib.auth import get_user_model

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.actions.keys import issue_key
from fairness.models import Replica, Tier
from fairness.scheduling.live_counts import person_load
from tests.support.cast import MODEL, Member
from tests.support.gateway_process import GatewayProcess
from tests.support.live_admission import chat_body, nothing_held, peak_overlap
from tests.support.polling import async_wait_for, wait_for
from tests.support.processes import start_gateway

STEP_MS = 100  # one token per sequence every 0.1 s however full the batch: streams of known length
SHORT = 40  # tokens: a stream of 4 s, long enough to still run while a loaded box drains
LONG = 600  # tokens: a minute, far past any grace period here
LEASE_TTL = 60.0  # a slot that came back only by expiring would take this long
GRACE = 1.0
# After its last answer the process still waits for its settles to reach Redis (at most 5 s) and
# gives its usage outbox a last try (at most 2 s): it has exited within this, well before any
# lease would have expired.
EXIT_BOUND = 10.0
EXITED = (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down


@dataclass
class Outcome:
    status: int
    body: bytes
    queued_ms: int
    retry_after: str | None
    answered_at: float  # the response's headers arrived: admitted and sent to the engine
    ended_at: float
    broken: bool  # the connection closed in the middle of the body

    @property
    def content_chunks(self) -> int:
        return self.body.count(b'"delta":{"content":')

    @property
    def complete(self) -> bool:
        """The stream ran to its end: [DONE] and no error event."""
        return not self.broken and self.body.endswith(b"data: [DONE]\n\n") and b'"error"' not in self.body

    def error_code(self) -> str | None:
        """The code of the OpenAI-shaped error in the body (the last event of a stream)."""
        for line in reversed(self.body.decode().splitlines()):
            payload = line.removeprefix("data: ")
            if payload.startswith('{"error"'):
                return json.loads(payload)["error"]["code"]
        return None


async def stream_chat(
    client: httpx.AsyncClient,
    url: str,
    member: Member,
    max_tokens: int,
    first_chunk: asyncio.Event | None = None,
) -> Outcome:
    body = chat_body(member, max_tokens=max_tokens, stream=True)
    headers = {"authorization": f"Bearer {member.secret}"}
    async with client.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as response:
        answered_at = time.monotonic()
        chunks, broken = [], False
        try:
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
                if first_chunk is not None:
                    first_chunk.set()
        except httpx.RemoteProtocolError:
            broken = True
        return Outcome(
            response.status_code, b"".join(chunks), int(response.headers.get("x-gpuportal-queued-ms", -1)),
            response.headers.get("retry-after"), answered_at, time.monotonic(), broken,
        )


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll a blocking condition from async code, with a deadline."""
    await async_wait_for(lambda: asyncio.to_thread(condition), timeout=timeout, what=what)


def refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def load(client: redis.Redis, member: Member) -> tuple[int, int]:
    """(in flight, queued) for the member's key, as admission counts them in Redis."""
    return person_load(client).get((member.user_id, member.tier), (0, 0))


def all_returned(client: redis.Redis) -> bool:
    return all(counts == (0, 0) for counts in person_load(client).values()) and nothing_held()


@pytest.fixture
def card(tiers) -> Iterator[EngineSimProcess]:
    """One replica with 8 slots whose streams last exactly max_tokens × 0.1 s."""
    engine = start_enginesim(
        model=MODEL, max_num_seqs=8, extra_args=["--step-base-ms", str(STEP_MS), "--step-per-seq-ms", "0"]
    )
    Replica.objects.create(name="card-8", base_url=engine.url, model=MODEL, max_num_seqs=8)
    yield engine
    engine.stop()


@pytest.fixture
def wide(tiers) -> Callable[[str], Member]:
    """Keys of a tier that may fill the whole card alone."""
    tier = Tier.objects.create(name="wide", per_key_concurrency=8, max_queued_per_key=16)

    def member(username: str) -> Member:
        user = get_user_model().objects.create(username=username)
        key, secret = issue_key(user, tier)
        return Member(username, tier.name, secret, key.pk, key.owner_id)

    return member


@pytest.fixture
def gateways(live_db_url: str, redis_url: str) -> Iterator[Callable[..., GatewayProcess]]:
    """Start gateway processes whose leases would outlive the test if nobody gave them back."""
    started: list[GatewayProcess] = []

    def start(name: str, **extra: str) -> GatewayProcess:
        process = start_gateway(live_db_url, name=name, GP_LEASE_TTL_SECONDS=str(LEASE_TTL), **extra)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def test_a_rolling_restart_finishes_every_stream_and_hands_the_slots_on_at_once(card, wide, gateways, redis_client):
    dave, erin = wide("dave"), wide("erin")
    leaving, staying = gateways("leaving"), gateways("staying")

    async def scenario() -> tuple[list[Outcome], list[Outcome], float, bool]:
        async with httpx.AsyncClient(timeout=30) as client:
            running = [asyncio.create_task(stream_chat(client, leaving.url, dave, SHORT)) for _ in range(8)]
            await until(lambda: card.stats()["running"] == 8, "dave's 8 streams on the card")
            waiting = [asyncio.create_task(stream_chat(client, staying.url, erin, 2)) for _ in range(8)]
            await until(lambda: load(redis_client, erin) == (0, 8), "erin's 8 queued behind the full card")
            assert not any(task.done() for task in running)

            leaving.terminate()
            terminated_at = time.monotonic()
            await until(lambda: refuses_connections(leaving.port), "the leaving gateway to refuse connections")
            refused_while_draining = not all(task.done() for task in running)
            return await asyncio.gather(*running), await asyncio.gather(*waiting), terminated_at, refused_while_draining

    finished, handed_on, terminated_at, refused_while_draining = asyncio.run(scenario())

    assert refused_while_draining  # new connections go elsewhere while the old ones drain
    for outcome in finished:
        assert outcome.status == 200
        assert outcome.complete, outcome.body[-200:]
        assert outcome.content_chunks == SHORT
    assert leaving.wait_exit(timeout=EXIT_BOUND) in EXITED

    assert all(outcome.status == 200 and outcome.complete for outcome in handed_on)
    assert all(outcome.answered_at > terminated_at for outcome in handed_on)  # they did wait
    last_stream_ended = max(outcome.ended_at for outcome in finished)
    last_granted = max(outcome.answered_at for outcome in handed_on)
    # A slot left to expire would keep one of erin's requests waiting for the lease TTL (60 s).
    assert last_granted - last_stream_ended < 1.0, (
        f"erin's last grant came {last_granted - last_stream_ended:.2f}s late"
    )
    wait_for(lambda: all_returned(redis_client), timeout=5, what="every slot free once erin is done")


# A queued stream is told its place once it has waited GP_QUEUE_EVENTS_AFTER_MS: its response has
# started then, so a shutdown can only end it with an error event, not answer 503. Both, apart.
QUEUE_EVENTS = {"a plain 429 or 503 while queued": "600000", "queue events from the start": "0"}


@pytest.mark.parametrize("after_ms", QUEUE_EVENTS.values(), ids=QUEUE_EVENTS.keys())
def test_shutdown_returns_held_and_queued_slots_at_once_not_after_the_lease_ttl(
    card, wide, gateways, redis_client, cast, after_ms
):
    dave, alice = wide("dave"), cast["alice"]
    leaving = gateways("leases", GP_SHUTDOWN_GRACE_SECONDS=str(GRACE), GP_QUEUE_EVENTS_AFTER_MS=after_ms)

    async def scenario() -> tuple[list[Outcome], list[Outcome], float]:
        async with httpx.AsyncClient(timeout=30) as client:
            holding = [asyncio.create_task(stream_chat(client, leaving.url, dave, LONG)) for _ in range(8)]
            await until(lambda: card.stats()["running"] == 8, "dave's 8 streams on the card")
            queued = [
                asyncio.create_task(stream_chat(client, leaving.url, member, SHORT))
                for member in (dave, dave, alice, alice)
            ]
            await until(
                lambda: load(redis_client, dave) == (8, 2) and load(redis_client, alice) == (0, 2),
                "8 leases held and 4 tickets queued",
            )
            leaving.terminate()
            terminated_at = time.monotonic()
            cut, turned_away = await asyncio.wait_for(
                asyncio.gather(asyncio.gather(*holding), asyncio.gather(*queued)), timeout=GRACE + 5
            )
            return cut, turned_away, terminated_at

    cut, turned_away, terminated_at = asyncio.run(scenario())
    # Given back at once, while the process is still winding down, not after the lease TTL.
    wait_for(lambda: all_returned(redis_client), timeout=3, what="every lease and ticket given back")
    assert time.monotonic() - terminated_at < GRACE + 8 < LEASE_TTL
    assert leaving.wait_exit(timeout=EXIT_BOUND) in EXITED
    for outcome in cut:  # the streams end with an error event, not a dropped connection
        assert outcome.status == 200 and not outcome.broken and not outcome.complete
        assert outcome.error_code() == "shutting_down"
    for outcome in turned_away:  # the queued requests are told to retry elsewhere
        if after_ms == "0":  # their streams had started: the error ends them
            assert outcome.status == 200 and not outcome.broken and not outcome.complete
            assert outcome.error_code() == "shutting_down"
        else:
            assert (outcome.status, outcome.error_code(), outcome.retry_after) == (503, "shutting_down", "1")
    wait_for(lambda: card.stats()["running"] == 0, timeout=5, what="the engine to drop the cut-off streams")


def test_a_stream_past_the_grace_period_is_cut_off_and_its_lease_returned(card, gateways, redis_client, cast):
    alice = cast["alice"]
    leaving = gateways("cut-off", GP_SHUTDOWN_GRACE_SECONDS=str(GRACE))

    async def scenario() -> tuple[Outcome, float]:
        async with httpx.AsyncClient(timeout=30) as client:
            first_chunk = asyncio.Event()
            task = asyncio.create_task(stream_chat(client, leaving.url, alice, LONG, first_chunk))
            await asyncio.wait_for(first_chunk.wait(), timeout=10)
            assert load(redis_client, alice) == (1, 0)
            leaving.terminate()
            terminated_at = time.monotonic()
            return await asyncio.wait_for(task, timeout=GRACE + 5), terminated_at

    outcome, terminated_at = asyncio.run(scenario())
    assert outcome.status == 200 and not outcome.broken  # ended, not dropped
    assert not outcome.complete and 0 < outcome.content_chunks < LONG
    assert outcome.error_code() == "shutting_down"
    assert GRACE - 0.1 < outcome.ended_at - terminated_at < GRACE + 2  # the grace, then the end
    assert leaving.wait_exit(timeout=GRACE + 3) in EXITED
    assert all_returned(redis_client)  # given back on the way out, not left to expire
    wait_for(lambda: card.stats()["running"] == 0, timeout=5, what="the engine to drop the cut-off stream")


def test_one_person_s_cap_holds_across_two_hosts_while_one_drains_and_the_other_serves(
    card, gateways, redis_client, cast
):
    """Two gateways as two hosts behind a balancer: fay's requests go to both, her cap of 2 holds
    at the engine throughout, the draining host finishes hers, and the other serves everyone."""
    tier = Tier.objects.create(name="pair", per_key_concurrency=2, max_queued_per_key=16)
    user = get_user_model().objects.create(username="fay")
    key, secret = issue_key(user, tier)
    fay, alice = Member("fay", tier.name, secret, key.pk, key.owner_id), cast["alice"]
    leaving, staying = gateways("host-a"), gateways("host-b")

    async def scenario() -> tuple[list[Outcome], list[Outcome], Outcome]:
        async with httpx.AsyncClient(timeout=30) as client:
            draining = [asyncio.create_task(stream_chat(client, leaving.url, fay, SHORT)) for _ in range(2)]
            await until(lambda: card.stats()["running"] == 2, "fay's 2 streams through host a on the card")
            queued = [asyncio.create_task(stream_chat(client, staying.url, fay, 2)) for _ in range(4)]
            await until(lambda: load(redis_client, fay) == (2, 4), "fay's 4 more held by her cap on host b")
            leaving.terminate()
            await until(lambda: refuses_connections(leaving.port), "host a to refuse connections")
            served = await stream_chat(client, staying.url, alice, 2)  # someone else, meanwhile
            return await asyncio.gather(*draining), await asyncio.gather(*queued), served

    finished, after, served = asyncio.run(scenario())

    assert all(o.status == 200 and o.complete and o.content_chunks == SHORT for o in finished)
    assert leaving.wait_exit(timeout=EXIT_BOUND) in EXITED
    assert all(o.status == 200 and o.complete for o in after)
    assert served.status == 200 and served.complete
    assert served.ended_at < max(o.ended_at for o in finished)  # served while host a still drained
    log = [entry for entry in card.requests() if entry["user"] == "fay"]
    assert len(log) == 6
    assert peak_overlap(log) == 2  # her cap, counted across both hosts, at the engine
