"""The key cache under concurrency: a key's first requests share one lookup, an entry past its TTL
is refreshed while requests go on with it, and a lookup that was under way when the cache was
cleared serves its request but is not kept: otherwise a revocation that commits while it runs
would leave the key alive for a whole TTL."""

import asyncio
import dataclasses

import pytest

from fairness.gateway.api_keys import KeyCache, KeyInfo
from fairness.gateway.errors import ApiError
from fairness.gateway.read_through import RETRY_SECONDS
from fairness.gateway.tier_policy import TierPolicy
from fairness.models import Tier

SECRET = "gp-" + "s" * 43
LIVE = KeyInfo(
    id=1, prefix=SECRET[:11], owner_id=1, tier=TierPolicy.of(Tier(name="interactive")), expires_at=None,
    revoked=False, owner_active=True,
)


class SlowLoader:
    """The database, one row: each lookup reads it when it starts and answers when released."""

    def __init__(self, row: KeyInfo) -> None:
        self.row = row
        self.calls = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, secret_hash: str) -> KeyInfo:
        self.calls += 1
        row = self.row  # what the query saw
        self.started.set()
        await self.release.wait()
        return row


async def test_a_lookup_that_straddles_a_clear_is_not_cached():
    loader = SlowLoader(LIVE)
    cache = KeyCache(ttl=60.0, clock=lambda: 0.0, loader=loader)
    lookup = asyncio.ensure_future(cache.authenticate(f"Bearer {SECRET}"))
    await loader.started.wait()
    # The revocation commits and the config epoch clears the cache while the lookup runs.
    loader.row = dataclasses.replace(LIVE, revoked=True)
    cache.clear()
    after = asyncio.ensure_future(cache.authenticate(f"Bearer {SECRET}"))  # does not join it
    loader.release.set()
    assert (await lookup).revoked is False  # the request that asked is answered as it started

    for asking in (after, cache.authenticate(f"Bearer {SECRET}")):
        with pytest.raises(ApiError) as caught:
            await asking
        assert caught.value.code == "revoked_api_key"
    assert loader.calls == 2  # looked up afresh, not served from the stale answer


async def test_a_lookup_with_no_clear_meanwhile_is_cached():
    loader = SlowLoader(LIVE)
    loader.release.set()
    cache = KeyCache(ttl=60.0, clock=lambda: 0.0, loader=loader)
    for _ in range(3):
        assert (await cache.authenticate(f"Bearer {SECRET}")).id == LIVE.id
    assert loader.calls == 1


async def test_a_deactivated_owner_is_refused_with_its_own_code():
    loader = SlowLoader(dataclasses.replace(LIVE, owner_active=False))
    loader.release.set()
    cache = KeyCache(ttl=60.0, loader=loader)
    with pytest.raises(ApiError) as caught:
        await cache.authenticate(f"Bearer {SECRET}")
    assert (caught.value.status, caught.value.code) == (401, "owner_inactive")


async def settled(condition, what: str) -> None:
    """Lets the loop run until `condition` holds (the cache's own tasks need turns, not time)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never: {what}")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_keys_first_requests_share_one_lookup():
    loader = SlowLoader(LIVE)
    cache = KeyCache(ttl=60.0, clock=lambda: 0.0, loader=loader)
    asking = [asyncio.ensure_future(cache.authenticate(f"Bearer {SECRET}")) for _ in range(32)]
    await loader.started.wait()
    loader.release.set()
    assert {info.id for info in await asyncio.gather(*asking)} == {LIVE.id}
    assert loader.calls == 1


async def test_a_waiter_that_leaves_does_not_end_the_others_lookup():
    loader = SlowLoader(LIVE)
    cache = KeyCache(ttl=60.0, clock=lambda: 0.0, loader=loader)
    leaving = asyncio.ensure_future(cache.authenticate(f"Bearer {SECRET}"))
    staying = asyncio.ensure_future(cache.authenticate(f"Bearer {SECRET}"))
    await loader.started.wait()
    leaving.cancel()
    loader.release.set()
    assert (await staying).id == LIVE.id
    assert loader.calls == 1


async def test_an_entry_past_its_ttl_answers_at_once_while_it_is_read_again():
    loader = SlowLoader(LIVE)
    loader.release.set()
    clock = Clock()
    cache = KeyCache(ttl=60.0, clock=clock, loader=loader)
    await cache.authenticate(f"Bearer {SECRET}")
    loader.release.clear()
    loader.started.clear()
    loader.row = dataclasses.replace(LIVE, revoked=True)  # changed without an epoch bump
    clock.now = 61.0

    # The request is answered from the entry it had, without waiting for the database ...
    answer = await asyncio.wait_for(cache.authenticate(f"Bearer {SECRET}"), 5)
    assert answer.revoked is False
    await loader.started.wait()
    assert (await cache.authenticate(f"Bearer {SECRET}")).revoked is False  # one refresh at a time
    assert loader.calls == 2
    # ... and once the refresh is read, the change counts.
    loader.release.set()
    await settled(lambda: cache.lookups_under_way == 0, "the refresh read")
    with pytest.raises(ApiError) as caught:
        await cache.authenticate(f"Bearer {SECRET}")
    assert caught.value.code == "revoked_api_key"
    assert loader.calls == 2


class FailingLoader:
    def __init__(self) -> None:
        self.calls = 0
        self.failing = False

    async def __call__(self, secret_hash: str) -> KeyInfo:
        self.calls += 1
        if self.failing:
            raise ConnectionError("the database is away")
        return LIVE


async def test_a_failed_refresh_keeps_the_entry_and_a_request_after_the_retry_delay_tries_again():
    loader = FailingLoader()
    clock = Clock()
    cache = KeyCache(ttl=60.0, clock=clock, loader=loader)
    await cache.authenticate(f"Bearer {SECRET}")
    loader.failing = True
    clock.now = 61.0
    for calls in (2, 3):
        assert (await cache.authenticate(f"Bearer {SECRET}")).id == LIVE.id
        await settled(lambda n=calls: loader.calls == n and cache.lookups_under_way == 0, "the refresh failed")
        # The database away: the requests until the retry delay are answered without trying it.
        clock.now += RETRY_SECONDS / 2
        assert (await cache.authenticate(f"Bearer {SECRET}")).id == LIVE.id
        await settled(lambda: cache.lookups_under_way == 0, "no refresh started")
        assert loader.calls == calls
        clock.now += RETRY_SECONDS / 2 + 0.01
    loader.failing = False
    await cache.authenticate(f"Bearer {SECRET}")
    await settled(lambda: cache.lookups_under_way == 0, "the refresh read")
    clock.now += 1.0  # read again just now: fresh, no further lookup
    await cache.authenticate(f"Bearer {SECRET}")
    assert loader.calls == 4

