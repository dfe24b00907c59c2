"""sshare's RawUsage and usage_report's Used count the same unit, weighted tokens, from the same
requests: fair share charges each one as its release does, the report sums the records. Decay only
ever takes away (a charge stamped ahead of the reader's clock, as a gateway whose clock runs fast
stamps it, counts in full and never more), so over the same requests the decayed figure is never
the larger, for any account or user row. A period that leaves out older requests (the report's
default starts on the 1st of the month) can show less than the decayed usage: that is the two
figures covering different requests, not the decay adding any."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest
import redis.asyncio
from django.conf import settings

from fairness.accounting.fair_share_usage import half_life_seconds
from fairness.gateway.associations import association_id
from fairness.models import ApiKey
from fairness.portal.reports import fair_share as fair_share_report
from fairness.portal.reports import usage as usage_report
from fairness.scheduling.admission import Admission
from fairness.scheduling.fair_share import weighted_tokens
from tests.support.redis_db import TEST_REDIS_URL
from tests.support.usage_records import record

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = 3600.0
SKEW = 300.0  # a gateway whose clock runs five minutes ahead


def charge_at(at: float, key: ApiKey, amount: float) -> None:
    """Charge as a gateway's release does, on a clock that reads `at`."""

    async def send() -> None:
        client = redis.asyncio.Redis.from_url(TEST_REDIS_URL)
        admission = Admission(client, clock=lambda: at, half_life_seconds=half_life_seconds())
        try:
            assert key.membership_id is not None
            await admission.send(admission.charge_command(association_id(key.membership_id), amount))
        finally:
            await admission.close()
            await client.aclose()

    asyncio.run(send())


def weighted(prompt: int, completion: int) -> float:
    return weighted_tokens(prompt, completion, settings.GP_FAIRSHARE_WEIGHT_PROMPT,
                           settings.GP_FAIRSHARE_WEIGHT_COMPLETION)


def run(requests: list[tuple[ApiKey, float, int, int]], now: float) -> dict[str, float]:
    """Record and charge each (key, age in seconds, prompt, completion), oldest first, as the
    gateway does both; returns what each association should hold now, decayed by hand as
    admission stores it: (value, when valued), decayed to each new charge, never by a negative age."""
    held: dict[str, tuple[float, float]] = {}
    life = half_life_seconds()

    def decay(value: float, valued_at: float, to: float) -> float:
        return value * 2 ** (-max(0.0, to - valued_at) / life)

    for key, age, prompt, completion in sorted(requests, key=lambda r: -r[1]):
        at = now - age
        record(key, at=dt.datetime.fromtimestamp(at, dt.UTC), prompt=prompt, completion=completion)
        charge_at(at, key, weighted(prompt, completion))
        value, valued_at = held.get(str(key.membership_id), (0.0, at))
        held[str(key.membership_id)] = (decay(value, valued_at, at) + weighted(prompt, completion), at)
    return {share: decay(value, valued_at, now) for share, (value, valued_at) in held.items()}


@pytest.fixture
def requests(tree, redis_url) -> list[tuple[ApiKey, float, int, int]]:
    """Over several half-lives (a week each), within the records' retention, one from a fast clock."""
    return [
        (tree.alice, 20 * 24 * HOUR, 9000, 3000), (tree.alice, 9 * 24 * HOUR, 500, 250),
        (tree.alice, 2 * HOUR, 100, 50), (tree.bob, 3 * 24 * HOUR, 4000, 100), (tree.bob, 0.5 * HOUR, 10, 5),
        (tree.carol, 26 * 24 * HOUR, 20000, 9000), (tree.carol_batch, 1 * 24 * HOUR, 700, 700),
        (tree.carol, -SKEW, 60, 30),
    ]


def test_decayed_usage_never_exceeds_the_raw_usage_of_the_same_requests(tree, requests):
    now = time.time()
    expected = run(requests, now)
    oldest = dt.datetime.fromtimestamp(now - max(age for _, age, _, _ in requests), dt.UTC).date()
    report = usage_report.account_tree(oldest, dt.date.fromtimestamp(now + 2 * 24 * HOUR))
    raw = {(row.group[0], row.group[1]): row.weighted_tokens for row in report.rows}
    table = fair_share_report.rows()

    assert {(row.account, row.user) for row in table} == set(raw)  # every account and user row, in both
    for row in table:
        assert row.raw_usage <= raw[row.account, row.user], (row, raw[row.account, row.user])
    members = {(row.account, row.user): row for row in table if row.user}
    by_key = {tree.alice: ("lab", "alice"), tree.bob: ("proj", "bob"), tree.carol: ("other", "carol")}
    for key, name in by_key.items():
        # The same unit: the decayed figure is the records' weighted tokens, each halved per half-life.
        # (rel 1e-5: it decays a little more in the moments between `now` and the read.)
        assert members[name].raw_usage == pytest.approx(expected[str(key.membership_id)], rel=1e-5)


def test_a_charge_stamped_ahead_of_the_readers_clock_counts_in_full_and_no_more(tree, redis_url):
    now = time.time()
    run([(tree.bob, -SKEW, 4000, 100)], now)
    report = usage_report.account_tree(dt.date.fromtimestamp(now - 24 * HOUR), dt.date.fromtimestamp(now + 24 * HOUR))
    bob = next(row for row in fair_share_report.rows() if row.user == "bob")
    assert bob.raw_usage == pytest.approx(weighted(4000, 100), rel=1e-12)  # no negative age: no growth
    assert bob.raw_usage <= next(row.weighted_tokens for row in report.rows if row.group == ("proj", "bob"))


def test_a_period_that_leaves_out_older_requests_can_show_less_than_the_decayed_usage(tree, requests):
    now = time.time()
    run(requests, now)
    recent = usage_report.account_tree(dt.date.fromtimestamp(now - 2 * 24 * HOUR),
                                       dt.date.fromtimestamp(now + 2 * 24 * HOUR))
    used = {(row.group[0], row.group[1]): row.weighted_tokens for row in recent.rows}
    decayed = {(row.account, row.user): row.raw_usage for row in fair_share_report.rows()}
    # alice's last two days are 200 weighted tokens; her decayed usage still holds a part of the
    # 15,000 from twenty days ago and of the 1,000 from nine.
    assert used["lab", "alice"] == weighted(100, 50)
    assert decayed["lab", "alice"] > 2 * used["lab", "alice"]
