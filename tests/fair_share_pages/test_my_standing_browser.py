"""A researcher's standing and usage pages in headless Chromium against a live gateway, at
desktop and phone width (nothing scrolls sideways, axe-core finds no violation), with a budget,
a heavy user's rank and a day of usage in both units on them."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
import redis.asyncio
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.accounting import usage_rollup
from fairness.accounting.fair_share_usage import half_life_seconds
from fairness.actions import budgets
from fairness.models import ApiKey, Replica, UsageRecord
from fairness.scheduling.admission import Admission, Demand, Grant
from fairness.scheduling.live_counts import person_load
from fairness.scheduling.units import unit_of
from fairness.store.redis_clients import redis_sync
from tests.support.accounts import charge, lab_tree
from tests.support.audit import SETUP
from tests.support.browser import sign_in
from tests.support.browser_checks import check_page
from tests.support.cast import ALICE_PASSWORD
from tests.support.polling import wait_for
from tests.support.redis_db import TEST_REDIS_URL
from tests.support.usage_records import record

User = get_user_model()


@pytest.mark.browser
def test_a_researcher_reads_their_standing_and_both_units_of_usage(chromium, gateway, cast, screenshot_dir):
    tree = lab_tree(keys_in_tree=True)
    charge((tree.alice, 1000.0))
    budgets.set_budget(SETUP, account=tree.lab, tokens=10_000, period="month")
    row = record(ApiKey.objects.get(pk=cast["alice"].key_id), at=timezone.now(), prompt=300, completion=50)
    UsageRecord.objects.filter(pk=row.pk).update(cached_tokens=100)
    row.refresh_from_db()
    usage_rollup.add([row])
    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in(page, gateway.url, "/me/", "alice", ALICE_PASSWORD)
        page.get_by_role("link", name="Your standing in full").click()
        page.wait_for_url(gateway.url + "/me/standing/")
        for path in ("/me/standing/", "/me/usage/", "/me/"):
            check_page(page, gateway.url + path)

        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(gateway.url + "/me/standing/")
        page.screenshot(path=screenshot_dir / "my-standing-390.png", full_page=True)
        accounts = page.get_by_role("region", name="Accounts and fair share").inner_text()
        assert "In nlp you used 2.5× your share lately" in accounts
        rank = page.get_by_role("region", name="How a request sent now would rank").inner_text()
        assert "less 4 minutes 7 seconds for fair share" in rank
        assert "lab" in page.get_by_role("region", name="Budgets and what is left").inner_text()
        today = page.locator("table.usage-days tbody tr").first.locator("td").all_inner_texts()
        assert today == ["1", "300", "100", "50", "310"]

        page.goto(gateway.url + "/me/usage/")
        units = page.get_by_role("region", name="Raw and weighted tokens per day")
        assert "2 × each completion token" in units.inner_text()
        assert units.locator("table.usage-days tbody tr").first.locator("td").last.inner_text() == "310"
        main = page.locator("main").inner_text()
        assert "bob" not in main and "carol" not in main
        assert errors == []


@pytest.mark.browser
def test_a_waiting_request_and_its_rank_read_well_at_both_widths(chromium, gateway, cast):
    """alice's request waits for the one slot bob holds (admission in a thread of this process,
    sharing the gateway's Redis); her standing page lists it with its parts."""
    tree = lab_tree(keys_in_tree=True)
    charge((tree.alice, 1000.0))
    # A draining replica: the gateway leaves its group alone, so its one slot is this test's.
    Replica.objects.create(name="one-slot", base_url="http://127.0.0.1:9", model="standing-model", max_num_seqs=1,
                           draining=True)
    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    queue = asyncio.run_coroutine_threadsafe(_one_waiting(cast, tree), loop).result(timeout=30)
    try:
        wait_for(lambda: person_load(redis_sync()).get((alice.pk, "interactive")) == (0, 1), what="alice waiting")
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            sign_in(page, gateway.url, "/me/standing/", "alice", ALICE_PASSWORD)
            check_page(page, gateway.url + "/me/standing/")
            row = page.locator("table.waiting tbody tr")
            assert row.count() == 1
            assert row.locator("th code").inner_text() == "alice-waiting-1"
            assert row.locator("td").all_inner_texts()[:1] == ["standing-model"]
            assert "+600 s" in row.inner_text() and "-247 s" in row.inner_text()
    finally:
        asyncio.run_coroutine_threadsafe(queue.close(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


class _Queue:
    """bob's lease on the only slot and alice's request waiting for it, until closed."""

    def __init__(self, admission: Admission, client: redis.asyncio.Redis, holder: Grant, waiting: asyncio.Task):
        self.admission, self.client, self.holder, self.waiting = admission, client, holder, waiting

    async def close(self) -> None:
        self.waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.waiting
        await self.admission.release(self.holder)
        await self.admission.close()
        await self.client.aclose()


async def _one_waiting(cast, tree) -> _Queue:
    client = redis.asyncio.Redis.from_url(TEST_REDIS_URL)
    admission = Admission(client, half_life_seconds=half_life_seconds())
    await admission.set_capacity("standing-model", 1)

    def interactive(person_id: int, **fair_share: object) -> Demand:
        return Demand(key_id=unit_of(person_id, "interactive"), tier="interactive", per_key_cap=2, pool_cap=None,
                      head_start_seconds=600.0, borrow=False, max_queued_per_key=16, max_wait_seconds=120.0,
                      group="standing-model", **fair_share)  # type: ignore[arg-type]

    holder = await admission.acquire(interactive(cast["bob"].user_id))
    alice = interactive(cast["alice"].user_id, association=str(tree.alice.pk), share=0.4, fairshare_weight=300.0)
    waiting = asyncio.get_running_loop().create_task(admission.acquire(alice, handle="alice-waiting-1"))
    return _Queue(admission, client, holder, waiting)
