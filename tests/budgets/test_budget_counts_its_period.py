"""A budget set or changed partway through its period counts the usage already recorded in it,
at once, and its "used" figure is the same whether or not Redis restarted since."""

import datetime as dt

import httpx
import pytest
import redis
from django.conf import settings
from django.utils import timezone

from fairness.accounting import usage
from fairness.actions import budgets
from fairness.actions.audit import Actor
from fairness.models import ApiKey, Budget, UsageRecord
from fairness.scheduling import fair_share
from fairness.store import keyspace
from fairness.store.redis_clients import redis_sync
from fairness.telemetry import budget_status
from tests.budgets.test_budget_status import record
from tests.budgets.test_budgets_live import post
from tests.support.polling import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def weighted(records) -> float:
    return sum(fair_share.weighted_tokens(r.prompt_tokens, r.completion_tokens, settings.GP_FAIRSHARE_WEIGHT_PROMPT,
                                          settings.GP_FAIRSHARE_WEIGHT_COMPLETION) for r in records)


def flushed(answers: list[httpx.Response]) -> list[UsageRecord]:
    ids = [a.headers["x-request-id"] for a in answers]

    def all_written() -> list[UsageRecord] | None:
        usage.flush(redis_sync())
        found = list(UsageRecord.objects.filter(request_id__in=ids))
        return found if len(found) == len(ids) else None

    return wait_for(all_written, timeout=10, what="the usage records")


def used(budget: Budget) -> float:
    return budget_status.status_of([budget])[0].used


def test_a_budget_set_partway_through_its_day_counts_the_work_already_done(gateway, cast, replica, staff_client,
                                                                           redis_url):
    alice = cast["alice"]
    answers = [post(gateway.url, alice) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    done = weighted(flushed(answers))
    key = ApiKey.objects.get(pk=alice.key_id)
    # Through the staff page: a day's budget a little below what alice has already used today.
    set_page = staff_client.post("/staff/budgets/set/", {"holder": f"key:{key.prefix}",
                                                         "tokens": int(done) - 1, "period": "day"})
    assert set_page.status_code == 302
    budget = Budget.objects.get(key=key)
    assert used(budget) == pytest.approx(done)
    refused = post(gateway.url, alice)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "budget_exceeded"
    redis.Redis.from_url(redis_url).flushdb()  # restarted empty
    assert budget_status.restore_if_lost() is True
    assert used(budget) == pytest.approx(done)


def test_changing_a_budget_neither_loses_nor_doubles_what_its_period_counted(cast, staff):
    alice, actor, now = cast["alice"], Actor(staff, "127.10.0.7"), timezone.now()
    key = ApiKey.objects.get(pk=alice.key_id)
    record(alice, 100, 50, now - dt.timedelta(minutes=5))  # 200 weighted, today
    record(alice, 10, 20, now - dt.timedelta(days=8))  # 50, neither today nor this week
    day = budgets.set_budget(actor, key=key, tokens=1000, period=Budget.Period.DAY)
    assert used(day) == pytest.approx(200)
    record(alice, 0, 25, now)  # 50 more, recorded while the budget stands
    day = budgets.set_budget(actor, key=key, tokens=2000, period=Budget.Period.DAY)  # the amount changed
    assert used(day) == pytest.approx(250)
    rolling = budgets.set_budget(actor, key=key, tokens=2000, period=Budget.Period.ROLLING, window_hours=240)
    assert used(rolling) == pytest.approx(300)  # ten days back reach the older record
    raised = budgets.set_budget(actor, key=key, tokens=5000, period=Budget.Period.DAY,
                                until=now + dt.timedelta(days=2))
    assert used(raised) == pytest.approx(250)
    redis_sync().flushdb()
    budget_status.restore_if_lost()
    assert [used(b) for b in (day, rolling, raised)] == pytest.approx([250, 300, 250])


def test_work_settled_but_not_yet_flushed_is_kept_when_a_budget_changes(cast, staff, redis_url):
    alice, actor = cast["alice"], Actor(staff, "127.10.0.7")
    key = ApiKey.objects.get(pk=alice.key_id)
    record(alice, 100, 50, timezone.now())  # 200 weighted
    budget = budgets.set_budget(actor, key=key, tokens=1000, period=Budget.Period.MONTH)
    window = budget_status.window_of(budget, timezone.now().timestamp())
    # What admission settles for a request whose usage record the flush has yet to write.
    counter = keyspace.admission_namespace(keyspace.PREFIX) + keyspace.ADMISSION_BUDGET_WINDOW + window.field
    redis.Redis.from_url(redis_url).hincrbyfloat(counter, keyspace.ADMISSION_FIELD_BUDGET_SETTLED, 30)
    budget = budgets.set_budget(actor, key=key, tokens=900, period=Budget.Period.MONTH)
    assert used(budget) == pytest.approx(230)
    assert redis.Redis.from_url(redis_url).ttl(counter) > 0
