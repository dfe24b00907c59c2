"""A person's requests waiting now, on /api/me/standing and /me/standing/: each with its place and
the parts of its rank as admission holds them (sprio's pending jobs), and nobody else's."""

from __future__ import annotations

import asyncio
import contextlib
import re

import pytest
import redis.asyncio
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import Client

from fairness.accounting.fair_share_usage import half_life_seconds
from fairness.models import Replica
from fairness.scheduling.admission import Admission, Demand
from fairness.scheduling.units import unit_of
from tests.support.accounts import LabTree, charge, lab_tree
from tests.support.admission import eventually, queued
from tests.support.redis_db import TEST_REDIS_URL

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/me/standing"
F_ALICE = 2 ** -2.5  # all of the usage against a share of 40%
GROUP = "standing-model"


@pytest.fixture
def charged(cast) -> LabTree:
    tree = lab_tree(keys_in_tree=True)
    charge((tree.alice, 1000.0))
    # A model only this test's admission states slots for: a gateway the session started earlier
    # leaves a draining replica's group alone, so its capacity is this test's one slot.
    Replica.objects.create(name="one-slot", base_url="http://127.0.0.1:9", model=GROUP, max_num_seqs=1,
                           draining=True)
    return tree


def interactive(person_id: int, **fair_share: object) -> Demand:
    """A request of the person's interactive key, as the gateway's demand_of makes it."""
    return Demand(key_id=unit_of(person_id, "interactive"), tier="interactive", per_key_cap=2, pool_cap=None,
                  head_start_seconds=600.0, borrow=False, max_queued_per_key=16, max_wait_seconds=120.0,
                  group=GROUP, **fair_share)  # type: ignore[arg-type]


def get(secret: str) -> dict:
    return Client().get(URL, HTTP_AUTHORIZATION=f"Bearer {secret}").json()


async def test_a_waiting_request_shows_its_place_and_the_parts_of_its_rank(cast, charged):
    client = redis.asyncio.Redis.from_url(TEST_REDIS_URL)
    admission = Admission(client, half_life_seconds=half_life_seconds())
    waiting: asyncio.Task | None = None
    try:
        await admission.set_capacity(GROUP, 1)
        holder = await admission.acquire(interactive(cast["bob"].user_id))  # bob holds the only slot
        alice = interactive(cast["alice"].user_id, association=str(charged.alice.pk), share=0.4,
                            fairshare_weight=300.0)
        waiting = asyncio.create_task(admission.acquire(alice, handle="alice-request-1"))
        await eventually(lambda: queued(admission, alice.key_id), what="alice's request waiting")

        body = await sync_to_async(get)(cast["alice"].secret)
        assert body["waiting_known"] is True
        [mine] = body["waiting"]
        assert (mine["id"], mine["model"], mine["tier"], mine["position"]) == ("alice-request-1", GROUP,
                                                                               "interactive", 0)
        assert 0.0 <= mine["age"] <= mine["waited"] < 30.0
        assert mine["head_start"] == 600.0
        assert mine["fair_share"] == pytest.approx(-300.0 * (1 - F_ALICE), rel=1e-3)
        assert mine["priority"] == pytest.approx(mine["age"] + 600.0 + mine["fair_share"])

        # A second request of hers waits behind her first, with the same parts but less age.
        second = asyncio.create_task(admission.acquire(alice, handle="alice-request-2"))
        try:
            await eventually(lambda: _at_least(admission, alice.key_id, 2), what="alice's second request")
            ids = [w["id"] for w in (await sync_to_async(get)(cast["alice"].secret))["waiting"]]
            assert ids == ["alice-request-1", "alice-request-2"]
        finally:
            await _cancelled(second)

        # bob's request runs, it does not wait; nobody else's waiting request reaches him.
        assert (await sync_to_async(get)(cast["bob"].secret))["waiting"] == []
        page = await sync_to_async(_standing_page)("alice")
        row = re.search(r'<table class="waiting">.*?<tbody>(.*?)</tbody>', page, re.S)
        assert row and "<code>alice-request-1</code>" in row.group(1) and "+600 s" in row.group(1)
        assert "-247 s" in row.group(1)
        await admission.release(holder)
    finally:
        if waiting is not None:
            await _cancelled(waiting)
        await admission.close()
        await client.aclose()


async def _cancelled(task: asyncio.Task) -> None:
    """Cancelling a waiting acquire takes its ticket out of the queue; wait until it has."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _at_least(admission: Admission, key_id: str, n: int) -> bool:
    return await queued(admission, key_id) >= n


def _standing_page(username: str) -> str:
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client.get("/me/standing/").content.decode()
